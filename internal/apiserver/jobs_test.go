package apiserver

import (
	"context"
	"math"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// workloadEnv serves a cluster whose workload controllers, scheduler and kubelets run, with
// one Ready worker; a Job's pods run jobRunTime.
func workloadEnv(t *testing.T, jobRunTime time.Duration) (*kubernetes.Clientset, context.Context) {
	t.Helper()
	env := newTestEnvSimulated(t, Options{}, store.ClusterOptions{}, simulate.Options{Workloads: true,
		PodStartDelay: 200 * time.Millisecond, JobRunTime: jobRunTime, PodStopDelay: 100 * time.Millisecond})
	n := workload.Node(workload.NodeSpec{Name: "worker-0", ProviderID: "goofy://worker-0", KubeletVersion: testVersion,
		InternalIP: "10.0.0.20", Ready: true}, metav1.Now())
	n.Spec.Taints = nil // CAPI removes the uninitialized taint
	n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.244.1.0/24", []string{"10.244.1.0/24"}
	createNode(t, env, n)
	return env.clientset(t), ctx(t)
}

func jobWith(name string, mutate func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "task", Image: "busybox"}}}}}}
	mutate(j)
	return j
}

func finishedJob(g Gomega, cs *kubernetes.Clientset, c context.Context, name string) *batchv1.Job {
	var job *batchv1.Job
	g.Eventually(func(g Gomega) {
		var err error
		job, err = cs.BatchV1().Jobs("default").Get(c, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(job.Status.Conditions).To(ContainElement(HaveField("Type", BeElementOf(batchv1.JobComplete, batchv1.JobFailed))))
	}, 45*time.Second, 100*time.Millisecond).Should(Succeed())
	return job
}

func conditionTypes(job *batchv1.Job) []batchv1.JobConditionType {
	var types []batchv1.JobConditionType
	for _, c := range job.Status.Conditions {
		types = append(types, c.Type)
	}
	return types
}

// TestJobPodFailurePolicyRefused: a podFailurePolicy with restartPolicy OnFailure, and
// backoffLimitPerIndex on a NonIndexed Job, are refused with upstream's 422.
func TestJobPodFailurePolicyRefused(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	cs, c := env.clientset(t), ctx(t)
	_, err := cs.BatchV1().Jobs("default").Create(c, jobWith("onfailure", func(j *batchv1.Job) {
		j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}}}
	}), metav1.CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	status := err.(apierrors.APIStatus).Status()
	g.Expect(status.Message).To(Equal(`Job.batch "onfailure" is invalid: spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified`))
	g.Expect(status.Details.Causes).To(Equal([]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid,
		Message: `Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified`, Field: "spec.template.spec.restartPolicy"}}))

	_, err = cs.BatchV1().Jobs("default").Create(c, jobWith("nonindexed", func(j *batchv1.Job) {
		j.Spec.BackoffLimitPerIndex = ptr.To[int32](1)
	}), metav1.CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(Equal(`Job.batch "nonindexed" is invalid: spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode`))
	_, err = cs.BatchV1().Jobs("default").Get(c, "onfailure", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
}

// TestJobBackoffLimitPerIndexUnlimited: with backoffLimitPerIndex and no backoffLimit the API
// server leaves the Job's limit unlimited (MaxInt32), so eight indexes failing once each (eight
// failures, more than the usual limit of 6) only use their own limits: their second pods
// succeed and the Job completes.
func TestJobBackoffLimitPerIndexUnlimited(t *testing.T) {
	g := NewWithT(t)
	cs, c := workloadEnv(t, 2*time.Second)
	job, err := cs.BatchV1().Jobs("default").Create(c, jobWith("shards", func(j *batchv1.Job) {
		j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		j.Spec.Completions, j.Spec.Parallelism = ptr.To[int32](8), ptr.To[int32](8)
		j.Spec.BackoffLimitPerIndex = ptr.To[int32](1)
	}), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(job.Spec.BackoffLimit).To(HaveValue(BeEquivalentTo(math.MaxInt32)))

	// Every index's first pod exits 1; the replacements come from the template and exit 0.
	patch := []byte(`{"metadata":{"annotations":{"` + simulate.ExitCodeAnnotation + `":"1"}}}`)
	g.Eventually(func(g Gomega) {
		pods, err := cs.CoreV1().Pods("default").List(c, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=shards"})
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range pods.Items {
			if p.Annotations[batchv1.JobIndexFailureCountAnnotation] == "0" && p.Annotations[simulate.ExitCodeAnnotation] == "" {
				_, err := cs.CoreV1().Pods("default").Patch(c, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
				g.Expect(err).NotTo(HaveOccurred())
			}
		}
		job, err = cs.BatchV1().Jobs("default").Get(c, "shards", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(job.Status.Failed).To(BeEquivalentTo(8))
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())

	job = finishedJob(g, cs, c, "shards")
	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete}),
		"%v", job.Status.Conditions)
	g.Expect(job.Status.Failed).To(BeEquivalentTo(8))
	g.Expect(job.Status.Succeeded).To(BeEquivalentTo(8))
	g.Expect(job.Status.FailedIndexes).To(HaveValue(BeEmpty()))
}

// TestEvictionAddsDisruptionTarget: the eviction subresource marks the pod DisruptionTarget
// (reason EvictionByEvictionAPI) before deleting it, as upstream's eviction REST; a
// resourceVersion precondition still holds across that write, a stale UID is a 409 with
// upstream's message, and a dry run writes nothing.
func TestEvictionAddsDisruptionTarget(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	cs, c := env.clientset(t), ctx(t)
	pods := cs.CoreV1().Pods("default")
	for _, name := range []string{"evicted", "dry", "stale"} {
		p, err := pods.Create(c, testPod("default", name, "n1", nil), metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		p.Status.Phase = corev1.PodRunning
		_, err = pods.UpdateStatus(c, p, metav1.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	hasCondition := HaveField("Status.Conditions", ContainElement(And(HaveField("Type", corev1.DisruptionTarget),
		HaveField("Status", corev1.ConditionTrue), HaveField("Reason", "EvictionByEvictionAPI"), HaveField("Message", "Eviction API: evicting"))))

	p, err := pods.Get(c, "evicted", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.EvictV1(c, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "evicted"},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &p.ResourceVersion}}})).To(Succeed())
	evicted, err := pods.Get(c, "evicted", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(evicted.DeletionTimestamp).NotTo(BeNil(), "deleted gracefully, after the condition")
	g.Expect(evicted).To(hasCondition)

	g.Expect(pods.EvictV1(c, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "dry"},
		DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})).To(Succeed())
	dry, err := pods.Get(c, "dry", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dry).NotTo(hasCondition)
	g.Expect(dry.DeletionTimestamp).To(BeNil())

	err = pods.EvictV1(c, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "stale"},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("0000"))}}})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(HavePrefix(`Operation cannot be fulfilled on Pod "stale": the UID in the precondition (0000) does not match the UID in record`))
	stale, err := pods.Get(c, "stale", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stale).NotTo(hasCondition)
}

// TestEvictedJobPodIgnored: a Job's pod evicted through the eviction API (as `kubectl drain`
// and CAPI's drain evict) carries DisruptionTarget when it fails, so the Job's Ignore rule on
// that condition does not count it: with backoffLimit 0 the Job replaces it and completes.
func TestEvictedJobPodIgnored(t *testing.T) {
	g := NewWithT(t)
	cs, c := workloadEnv(t, 3*time.Second)
	w, err := cs.CoreV1().Pods("default").Watch(c, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=drained"})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	_, err = cs.BatchV1().Jobs("default").Create(c, jobWith("drained", func(j *batchv1.Job) {
		j.Spec.BackoffLimit = ptr.To[int32](0)
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}}}
	}), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	var first *corev1.Pod
	for first == nil {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
				first = p
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the Job's pod did not start")
		}
	}
	g.Expect(cs.CoreV1().Pods("default").EvictV1(c, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: first.Name}})).To(Succeed())

	// The evicted pod's last state, as the Job controller saw it before it went.
	var last *corev1.Pod
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok && p.UID == first.UID {
				last, done = p, ev.Type == watch.Deleted
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the evicted pod was not deleted")
		}
	}
	g.Expect(last.Status.Phase).To(Equal(corev1.PodFailed))
	g.Expect(last.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.DisruptionTarget),
		HaveField("Status", corev1.ConditionTrue), HaveField("Reason", "EvictionByEvictionAPI"))))

	job := finishedJob(g, cs, c, "drained")
	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete}),
		"%v", job.Status.Conditions)
	g.Expect(job.Status.Failed).To(BeZero(), "the evicted pod's failure is ignored")
	g.Expect(job.Status.Succeeded).To(BeEquivalentTo(1))
}
