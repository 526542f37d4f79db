package controllers

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// TestCachedClustersKeepTheirGates: a cached Cluster keeps metadata, spec and what the GoofyMachine
// reconciler waits on (clusterGatesOf, through the condition or the initialization flag, with the
// other conditions around it), and drops the rest of its status and its managed fields.
func TestCachedClustersKeepTheirGates(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: "R", Message: "a message CAPI writes"}
	}
	for _, tc := range []struct {
		name   string
		status clusterv1.ClusterStatus
	}{
		{"nothing yet", clusterv1.ClusterStatus{Phase: "Provisioning"}},
		{"infrastructure provisioned", clusterv1.ClusterStatus{
			Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true)},
			Conditions: []metav1.Condition{cond(clusterv1.ClusterInfrastructureReadyCondition, metav1.ConditionTrue),
				cond(clusterv1.ClusterControlPlaneInitializedCondition, metav1.ConditionFalse)},
		}},
		{"control plane initialized (condition)", clusterv1.ClusterStatus{
			Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true)},
			Conditions: []metav1.Condition{cond(clusterv1.AvailableCondition, metav1.ConditionFalse),
				cond(clusterv1.ClusterControlPlaneInitializedCondition, metav1.ConditionTrue), cond(clusterv1.PausedCondition, metav1.ConditionFalse)},
			Phase: "Provisioned",
		}},
		{"control plane initialized (flag)", clusterv1.ClusterStatus{
			Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true), ControlPlaneInitialized: ptr.To(true)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clusterv1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ns", Labels: map[string]string{"l": "v"},
					ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "capi"}}},
				Spec:   clusterv1.ClusterSpec{Paused: ptr.To(true), ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 20000}},
				Status: tc.status,
			}
			want := c.DeepCopy()
			out, err := ClusterCache().Transform(c)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*clusterv1.Cluster)
			if clusterGatesOf(got) != clusterGatesOf(want) {
				t.Errorf("gates %+v, want %+v", clusterGatesOf(got), clusterGatesOf(want))
			}
			NewWithT(t).Expect(got.Spec).To(Equal(want.Spec))
			if got.ManagedFields != nil || got.Status.Phase != "" || len(got.Status.Conditions) > 1 {
				t.Errorf("kept %v managed fields, phase %q, conditions %v", got.ManagedFields, got.Status.Phase, got.Status.Conditions)
			}
		})
	}
}

// TestCachedMachinesKeepTheirSpec: a cached Machine keeps metadata and spec, and drops its status
// and managed fields.
func TestCachedMachinesKeepTheirSpec(t *testing.T) {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: "ns", Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "capi"}}},
		Spec: clusterv1.MachineSpec{ClusterName: "c1", Version: "v1.36.3", FailureDomain: "fd1",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("m1-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "GoofyMachine", Name: "m1"}},
		Status: clusterv1.MachineStatus{Phase: "Running", NodeRef: clusterv1.MachineNodeReference{Name: "n1"},
			Addresses: clusterv1.MachineAddresses{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.1"}}},
	}
	want := m.DeepCopy()
	out, err := MachineCache().Transform(m)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*clusterv1.Machine)
	want.ManagedFields, want.Status = nil, clusterv1.MachineStatus{}
	NewWithT(t).Expect(got).To(Equal(want))
}

// bodyRecorder is an HTTP transport that keeps a copy of the response bodies of the requests
// whose path contains one of its words.
type bodyRecorder struct {
	next  http.RoundTripper
	words []string
	mu    sync.Mutex
	bytes map[string]*bytes.Buffer // per word
}

func (r *bodyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	for _, w := range r.words {
		if strings.HasSuffix(req.URL.Path, "/"+w) {
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(resp.Body, r.writer(w)), resp.Body}
		}
	}
	return resp, nil
}

func (r *bodyRecorder) writer(word string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.bytes[word].Write(p)
	})
}

func (r *bodyRecorder) read(word string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes[word].String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func newBodyRecorder(next http.RoundTripper, words ...string) *bodyRecorder {
	r := &bodyRecorder{next: next, words: words, bytes: map[string]*bytes.Buffer{}}
	for _, w := range words {
		r.bytes[w] = &bytes.Buffer{}
	}
	return r
}

// TestCacheDecodesTrimmedResponses: controller-runtime's cache, over CacheTransport against a
// real kube-apiserver, lists and watches CAPI's Machines and Clusters and Goofy's objects and
// holds what the transforms alone would give (spec, metadata, a Cluster's gates, the statuses
// of Goofy's objects; no managed fields), follows their changes, while its decoder never sees
// managed fields, a Machine's status or a Cluster's phase and conditions other than
// ControlPlaneInitialized; Secrets (protobuf) pass as served.
func TestCacheDecodesTrimmedResponses(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := newNamespace(t)
	f := newFixture(t, ns, "trimmed", nil)
	f.cluster.Status = clusterv1.ClusterStatus{
		Phase:          "Provisioned",
		Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true)},
		Conditions: []metav1.Condition{
			{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue, Reason: "Initialized", LastTransitionTime: metav1.Now()},
			{Type: clusterv1.AvailableCondition, Status: metav1.ConditionFalse, Reason: "NotYet", LastTransitionTime: metav1.Now()},
		},
	}
	g.Expect(k8sClient.Status().Update(ctx, f.cluster)).To(Succeed())
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: "trimmed"}},
		Spec: clusterv1.MachineSpec{ClusterName: "trimmed", Version: "v1.36.3",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("m1-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "GoofyMachine", Name: "m1"}},
	}
	g.Expect(k8sClient.Create(ctx, machine)).To(Succeed())
	machine.Status = clusterv1.MachineStatus{Phase: "Provisioning", Addresses: clusterv1.MachineAddresses{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.1"}}}
	g.Expect(k8sClient.Status().Update(ctx, machine)).To(Succeed())

	base, err := rest.HTTPClientFor(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	decoded := newBodyRecorder(base.Transport, "machines", "clusters", "goofyclusters", "secrets") // what the decoder reads
	served := newBodyRecorder(decoded.next, "machines")                                            // what the API server sent
	decoded.next = CacheTransport(served)
	c, err := cache.New(cfg, cache.Options{
		Scheme:            testScheme,
		HTTPClient:        &http.Client{Transport: decoded},
		DefaultTransform:  cache.TransformStripManagedFields(),
		DefaultNamespaces: map[string]cache.Config{ns: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}:     SecretCache(),
			&clusterv1.Machine{}: MachineCache(),
			&clusterv1.Cluster{}: ClusterCache(),
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(ctx) }()

	gotMachine := &clusterv1.Machine{}
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(machine), gotMachine) }, 30*time.Second).Should(Succeed())
	g.Expect(gotMachine.Spec).To(Equal(machine.Spec))
	g.Expect(gotMachine.Status).To(Equal(clusterv1.MachineStatus{}))
	g.Expect(gotMachine.ManagedFields).To(BeNil())

	gotCluster := &clusterv1.Cluster{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(f.cluster), gotCluster)).To(Succeed())
	g.Expect(clusterGatesOf(gotCluster)).To(Equal(clusterGatesOf(f.cluster)))
	g.Expect(gotCluster.Spec).To(Equal(f.cluster.Spec))
	gotGoofyCluster := &infrav1.GoofyCluster{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(f.gc), gotGoofyCluster)).To(Succeed())
	g.Expect(gotGoofyCluster.Spec).To(Equal(f.gc.Spec))
	ca := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "trimmed-ca"}, ca)).To(Succeed())
	g.Expect(ca.Data).To(HaveKey(corev1.TLSCertKey))

	// Changes arrive through the watch, trimmed the same way.
	patch := client.MergeFrom(machine.DeepCopy())
	machine.Labels["changed"] = "yes"
	g.Expect(k8sClient.Patch(ctx, machine, patch)).To(Succeed())
	machine.Status.Phase = "Running"
	g.Expect(k8sClient.Status().Update(ctx, machine)).To(Succeed())
	g.Eventually(func() string {
		_ = c.Get(ctx, client.ObjectKeyFromObject(machine), gotMachine)
		return gotMachine.Labels["changed"]
	}, 30*time.Second).Should(Equal("yes"))
	g.Expect(gotMachine.Status).To(Equal(clusterv1.MachineStatus{}))

	g.Eventually(func() string { return served.read("machines") }, 30*time.Second).Should(ContainSubstring(`"Running"`))
	for _, word := range []string{"machines", "clusters", "goofyclusters"} {
		g.Expect(decoded.read(word)).To(ContainSubstring(`"resourceVersion"`), word)
		g.Expect(decoded.read(word)).NotTo(ContainSubstring(`"managedFields"`), word)
	}
	g.Expect(served.read("machines")).To(ContainSubstring(`"managedFields"`))
	g.Expect(decoded.read("machines")).NotTo(ContainSubstring(`"Provisioning"`))
	g.Expect(decoded.read("machines")).NotTo(ContainSubstring(`"Running"`))
	g.Expect(decoded.read("clusters")).NotTo(ContainSubstring(`"Provisioned"`))
	g.Expect(decoded.read("clusters")).To(ContainSubstring(`"` + clusterv1.ClusterControlPlaneInitializedCondition + `"`))
	g.Expect(decoded.read("clusters")).NotTo(ContainSubstring(`"NotYet"`))
	g.Expect(decoded.read("secrets")).NotTo(BeEmpty())
}
