package controllers

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

func provisioning(d time.Duration, jitter string) infrav1.ProvisioningSpec {
	return infrav1.ProvisioningSpec{StartupDuration: metav1.Duration{Duration: d}, StartupJitter: jitter}
}

func TestPhaseDurationWithoutJitter(t *testing.T) {
	g := NewWithT(t)
	g.Expect(phaseDuration(provisioning(0, "0.5"), "x")).To(BeZero())
	g.Expect(phaseDuration(provisioning(-time.Second, "0.5"), "x")).To(BeZero())
	g.Expect(phaseDuration(provisioning(10*time.Second, ""), "x")).To(Equal(10 * time.Second))
	g.Expect(phaseDuration(provisioning(10*time.Second, "0"), "x")).To(Equal(10 * time.Second))
	// Unparseable jitter (the CRD pattern forbids it) falls back to the plain duration.
	g.Expect(phaseDuration(provisioning(10*time.Second, "lots"), "x")).To(Equal(10 * time.Second))
}

// TestPhaseDurationJitter: durations stay in [d, d*(1+jitter)), are the same for the same machine
// and phase (reconciles and restarts agree), and spread uniformly over machines.
func TestPhaseDurationJitter(t *testing.T) {
	g := NewWithT(t)
	const d = 10 * time.Second
	for _, jitter := range []string{"0.2", "1", ".5"} {
		spec := provisioning(d, jitter)
		var j float64
		_, _ = fmt.Sscanf(jitter, "%g", &j)
		upper := d + time.Duration(float64(d)*j)
		const n = 4000
		var sum float64
		buckets := make([]int, 10)
		for i := 0; i < n; i++ {
			seed := fmt.Sprintf("uid-%d/%s", i, infrav1.VMProvisionedCondition)
			got := phaseDuration(spec, seed)
			g.Expect(got).To(BeNumerically(">=", d), jitter)
			g.Expect(got).To(BeNumerically("<", upper), jitter)
			g.Expect(phaseDuration(spec, seed)).To(Equal(got), "stable for a seed")
			share := float64(got-d) / float64(upper-d)
			sum += share
			buckets[int(share*10)]++
		}
		g.Expect(sum/n).To(BeNumerically("~", 0.5, 0.03), "mean share for jitter %s", jitter)
		for i, b := range buckets {
			g.Expect(b).To(BeNumerically("~", n/10, n/25), "bucket %d for jitter %s", i, jitter)
		}
	}
	// Phases of one machine draw independently.
	spec := provisioning(d, "1")
	g.Expect(phaseDuration(spec, "uid/"+infrav1.VMProvisionedCondition)).NotTo(Equal(phaseDuration(spec, "uid/"+infrav1.NodeProvisionedCondition)))
}
