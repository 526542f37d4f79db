package simulate_test

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
)

func jobPods(g Gomega, e *env, job string) []corev1.Pod {
	pods, err := e.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	g.Expect(err).NotTo(HaveOccurred())
	sort.Slice(pods.Items, func(i, j int) bool {
		a, b := pods.Items[i].CreationTimestamp, pods.Items[j].CreationTimestamp
		return a.Before(&b) || a.Equal(&b) && pods.Items[i].Name < pods.Items[j].Name
	})
	return pods.Items
}

func conditionTypes(job *batchv1.Job) []batchv1.JobConditionType {
	var types []batchv1.JobConditionType
	for _, c := range job.Status.Conditions {
		types = append(types, c.Type)
	}
	return types
}

// runJob applies a Job named name whose spec has the given lines (two-space indented, as under
// spec:) and whose pods have restartPolicy and, when exitCode is set, the exit-code annotation,
// and waits for the Job's condition (complete or failed).
func runJob(e *env, name, spec, restartPolicy, exitCode, condition string) *batchv1.Job {
	e.t.Helper()
	meta := ""
	if exitCode != "" {
		meta = "    metadata:\n      annotations: {" + simulate.ExitCodeAnnotation + ": \"" + exitCode + "\"}\n"
	}
	e.kubectl(true, "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: "+name+"\nspec:\n"+spec+"  template:\n"+meta+
		"    spec:\n      restartPolicy: "+restartPolicy+"\n      containers:\n      - name: task\n        image: busybox\n", "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition="+condition, "job/"+name, "--timeout=60s")
	job, err := e.cs.BatchV1().Jobs("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return job
}

// TestJobBackoffLimitExceeded: pods whose containers exit 1 (the exit-code annotation) fail;
// each failure counts against backoffLimit, a replacement waits the pod failure back-off
// (doubling), and the Job reports FailureTarget then Failed with BackoffLimitExceeded once
// backoffLimit+1 pods failed; `kubectl wait --for=condition=failed` returns.
func TestJobBackoffLimitExceeded(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	e.sim.SetPodFailureBackoff(time.Second)
	job := runJob(e, "flaky", "  backoffLimit: 2\n", "Never", "3", "failed")
	g.Expect(job.Status.Failed).To(BeEquivalentTo(3))
	g.Expect(job.Status.Succeeded).To(BeZero())
	g.Expect(job.Status.Active).To(BeZero())
	g.Expect(job.Status.CompletionTime).To(BeNil(), "a failed Job has no completionTime")
	g.Expect(job.Status.UncountedTerminatedPods).To(Or(BeNil(), HaveField("Failed", BeEmpty())))
	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobFailureTarget, batchv1.JobFailed}))
	for _, c := range job.Status.Conditions {
		g.Expect(c.Reason).To(Equal(batchv1.JobReasonBackoffLimitExceeded))
		g.Expect(c.Message).To(Equal("Job has reached the specified backoff limit"))
	}
	pods := jobPods(g, e, "flaky")
	g.Expect(pods).To(HaveLen(3))
	for i, p := range pods {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodFailed), p.Name)
		g.Expect(p.Finalizers).NotTo(ContainElement(batchv1.JobTrackingFinalizer), p.Name)
		term := p.Status.ContainerStatuses[0].State.Terminated
		g.Expect(term).NotTo(BeNil())
		g.Expect(term.ExitCode).To(BeEquivalentTo(3))
		g.Expect(term.Reason).To(Equal("Error"))
		if i > 0 {
			// The back-off: 1 s after the first failure, 2 s after the second.
			prev := pods[i-1].Status.ContainerStatuses[0].State.Terminated.FinishedAt
			g.Expect(p.CreationTimestamp.Sub(prev.Time)).To(BeNumerically(">=", time.Duration(1<<(i-1))*time.Second), p.Name)
		}
	}
}

// TestJobActiveDeadline: a Job running longer than activeDeadlineSeconds fails with
// DeadlineExceeded; its running pod is deleted and counted as failed.
func TestJobActiveDeadline(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	e.sim.Configure("test", simulate.ClusterOptions{JobRunTime: time.Hour})
	job := runJob(e, "slow", "  activeDeadlineSeconds: 2\n", "Never", "", "failed")
	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobFailureTarget, batchv1.JobFailed}))
	g.Expect(job.Status.Conditions[1].Reason).To(Equal(batchv1.JobReasonDeadlineExceeded))
	g.Expect(job.Status.Conditions[1].Message).To(Equal("Job was active longer than specified deadline"))
	g.Expect(job.Status.Failed).To(BeEquivalentTo(1))
	g.Expect(job.Status.Active).To(BeZero())
	g.Expect(*job.Status.Terminating).To(BeZero())
	g.Expect(job.Status.Conditions[1].LastTransitionTime.Sub(job.Status.StartTime.Time)).To(BeNumerically(">=", 2*time.Second))
}

// TestJobOnFailureRestarts: with restartPolicy OnFailure a failing container is restarted in
// place by the kubelet after its crash-loop back-off (CrashLoopBackOff, restartCount,
// lastState), and the restarts count against backoffLimit.
func TestJobOnFailureRestarts(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	e.sim.SetPodFailureBackoff(200 * time.Millisecond)
	ctx := context.Background()
	w, err := e.cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=crashy"})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	job := runJob(e, "crashy", "  backoffLimit: 2\n", "OnFailure", "1", "failed")
	g.Expect(job.Status.Conditions[len(job.Status.Conditions)-1].Reason).To(Equal(batchv1.JobReasonBackoffLimitExceeded))

	var crashLoop bool
	var restarts int32
	names := map[string]bool{}
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			names[p.Name] = true
			for _, cs := range p.Status.ContainerStatuses {
				restarts = max(restarts, cs.RestartCount)
				if cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" &&
					cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ExitCode == 1 {
					crashLoop = true
				}
				g.Expect(p.Status.Phase).NotTo(Equal(corev1.PodFailed), "OnFailure: the kubelet restarts the container, the pod does not fail")
			}
			if ev.Type == watch.Deleted {
				done = true
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the failed Job's pod was not deleted")
		}
	}
	g.Expect(names).To(HaveLen(1), "one pod, restarted in place")
	g.Expect(crashLoop).To(BeTrue())
	g.Expect(restarts).To(BeEquivalentTo(2))
}

// TestIndexedJob: completionMode Indexed runs one pod per index, parallelism at a time, each
// with the completion index annotation and label, the JOB_COMPLETION_INDEX variable, the
// hostname <job>-<index> and a name <job>-<index>-<random>; completedIndexes in upstream's
// compressed form.
func TestIndexedJob(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	job := runJob(e, "shards", "  completionMode: Indexed\n  completions: 5\n  parallelism: 2\n", "Never", "", "complete")
	g.Expect(job.Status.CompletedIndexes).To(Equal("0-4"))
	g.Expect(job.Status.Succeeded).To(BeEquivalentTo(5))
	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete}))
	pods := jobPods(g, e, "shards")
	g.Expect(pods).To(HaveLen(5))
	seen := map[string]bool{}
	for _, p := range pods {
		ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		g.Expect(ix).NotTo(BeEmpty())
		seen[ix] = true
		g.Expect(p.Labels).To(HaveKeyWithValue(batchv1.JobCompletionIndexAnnotation, ix))
		g.Expect(p.Spec.Hostname).To(Equal("shards-" + ix))
		g.Expect(strings.HasPrefix(p.Name, "shards-"+ix+"-")).To(BeTrue(), p.Name)
		g.Expect(p.Spec.Containers[0].Env).To(ContainElement(HaveField("Name", "JOB_COMPLETION_INDEX")))
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded))
	}
	g.Expect(seen).To(HaveLen(5))
}

// TestIndexedJobSuccessPolicy: an Indexed Job whose successPolicy names indexes 0 and 1
// succeeds once they did (SuccessCriteriaMet then Complete, reason SuccessPolicy), without
// running the other indexes.
func TestIndexedJobSuccessPolicy(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	job := runJob(e, "leader", "  completionMode: Indexed\n  completions: 5\n  parallelism: 1\n  successPolicy:\n    rules: [{succeededIndexes: \"0-1\"}]\n",
		"Never", "", "complete")
	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete}))
	for _, c := range job.Status.Conditions {
		g.Expect(c.Reason).To(Equal(batchv1.JobReasonSuccessPolicy))
		g.Expect(c.Message).To(Equal("Matched rules at index 0"))
	}
	g.Expect(job.Status.CompletedIndexes).To(Equal("0,1"))
	g.Expect(job.Status.Succeeded).To(BeEquivalentTo(2))
	g.Expect(job.Status.CompletionTime).NotTo(BeNil())
}

// TestJobPodFailurePolicyFailJob: podFailurePolicy's rules apply in order: exit code 42 passes
// the Count rule for 1 and matches the FailJob rule for the task container, so the Job fails
// at its first failed pod (backoffLimit 6) with reason PodFailurePolicy and upstream's message;
// exit code 1 matches the Count rule and counts against backoffLimit as without a policy.
func TestJobPodFailurePolicyFailJob(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	policy := "  podFailurePolicy:\n    rules:\n    - action: Count\n      onExitCodes: {operator: In, values: [1]}\n" +
		"    - action: FailJob\n      onExitCodes: {containerName: task, operator: NotIn, values: [0, 1]}\n"
	job := runJob(e, "fatal", "  backoffLimit: 6\n"+policy, "Never", "42", "failed")
	pods := jobPods(g, e, "fatal")
	g.Expect(pods).To(HaveLen(1), "FailJob: no pod replaces the failed one")
	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobFailureTarget, batchv1.JobFailed}))
	for _, c := range job.Status.Conditions {
		g.Expect(c.Reason).To(Equal(batchv1.JobReasonPodFailurePolicy))
		g.Expect(c.Message).To(Equal("Container task for pod default/" + pods[0].Name + " failed with exit code 42 matching FailJob rule at index 1"))
	}
	g.Expect(job.Status.Failed).To(BeEquivalentTo(1))
	g.Expect(job.Status.Active).To(BeZero())

	job = runJob(e, "counted", "  backoffLimit: 0\n"+policy, "Never", "1", "failed")
	g.Expect(job.Status.Conditions[len(job.Status.Conditions)-1].Reason).To(Equal(batchv1.JobReasonBackoffLimitExceeded))
	g.Expect(job.Status.Failed).To(BeEquivalentTo(1))
}

// TestJobPodFailurePolicyIgnoresDisruption: a Job's pod evicted by a NoExecute taint gets the
// DisruptionTarget condition and, once its kubelet has stopped it, phase Failed (exit code
// 143), which the Job waits for with a podFailurePolicy; its rule Ignores the failure, so with
// backoffLimit 0 the Job replaces the pod on the other node and completes with failed 0.
func TestJobPodFailurePolicyIgnoresDisruption(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	e.addNode("worker-1", "10.0.0.21", false)
	e.sim.SetPodFailureBackoff(200 * time.Millisecond)
	e.sim.Configure("test", simulate.ClusterOptions{JobRunTime: 2 * time.Second})
	ctx := context.Background()
	w, err := e.cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=evicted"})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	e.kubectl(true, "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: evicted\nspec:\n  backoffLimit: 0\n  podFailurePolicy:\n    rules:\n"+
		"    - action: Ignore\n      onPodConditions: [{type: DisruptionTarget}]\n  template:\n    spec:\n      restartPolicy: Never\n"+
		"      containers:\n      - name: task\n        image: busybox\n", "apply", "-f", "-")

	var first corev1.Pod
	g.Eventually(func(g Gomega) {
		pods := jobPods(g, e, "evicted")
		g.Expect(pods).NotTo(BeEmpty())
		g.Expect(pods[0].Status.Phase).To(Equal(corev1.PodRunning))
		first = pods[0]
	}, safetyTimeout, poll).Should(Succeed())
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := e.cs.CoreV1().Nodes().Get(ctx, first.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "example.com/drain", Effect: corev1.TaintEffectNoExecute})
		_, err = e.cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})).To(Succeed())
	e.kubectl(true, "", "wait", "--for=condition=complete", "job/evicted", "--timeout=60s")

	// The evicted pod's last state, as watchers saw it before it went.
	var last *corev1.Pod
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok && p.UID == first.UID {
				last = p
				done = ev.Type == watch.Deleted
			}
		case <-time.After(safetyTimeout):
			t.Fatal("the evicted pod was not deleted")
		}
	}
	g.Expect(last.Status.Phase).To(Equal(corev1.PodFailed))
	g.Expect(last.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.DisruptionTarget),
		HaveField("Status", corev1.ConditionTrue), HaveField("Reason", "DeletionByTaintManager"))))
	g.Expect(last.Status.ContainerStatuses[0].State.Terminated).To(HaveField("ExitCode", BeEquivalentTo(143)))

	job, err := e.cs.BatchV1().Jobs("default").Get(ctx, "evicted", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(job.Status.Failed).To(BeZero(), "the ignored failure is not counted")
	g.Expect(job.Status.Succeeded).To(BeEquivalentTo(1))
	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete}))
	pods := jobPods(g, e, "evicted")
	g.Expect(pods).To(HaveLen(1))
	g.Expect(pods[0].UID).NotTo(Equal(first.UID))
	g.Expect(pods[0].Spec.NodeName).NotTo(Equal(first.Spec.NodeName))
}

// TestIndexedJobBackoffLimitPerIndex: with backoffLimitPerIndex 1 each index may fail once:
// indexes 1 and 3, whose pods exit 1 every time, fail after their second pod (which carries
// job-index-failure-count 1 and waits the per-index back-off), the others succeed, and the Job
// fails with FailedIndexes once every index has finished; status.failedIndexes "1,3".
func TestIndexedJobBackoffLimitPerIndex(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	e.sim.SetPodFailureBackoff(time.Second)
	e.sim.Configure("test", simulate.ClusterOptions{JobRunTime: time.Second})
	ctx := context.Background()
	e.kubectl(true, "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: shards\nspec:\n  completionMode: Indexed\n  completions: 4\n"+
		"  parallelism: 4\n  backoffLimitPerIndex: 1\n  template:\n    spec:\n      restartPolicy: Never\n"+
		"      containers:\n      - name: task\n        image: busybox\n", "apply", "-f", "-")
	// Indexes 1 and 3 fail: each of their pods gets the exit-code annotation while it runs.
	var job *batchv1.Job
	g.Eventually(func(g Gomega) {
		for _, p := range jobPods(g, e, "shards") {
			ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
			if (ix == "1" || ix == "3") && p.Annotations[simulate.ExitCodeAnnotation] == "" {
				_, err := e.cs.CoreV1().Pods("default").Patch(ctx, p.Name, types.MergePatchType,
					[]byte(`{"metadata":{"annotations":{"`+simulate.ExitCodeAnnotation+`":"1"}}}`), metav1.PatchOptions{})
				g.Expect(err).NotTo(HaveOccurred())
			}
		}
		var err error
		job, err = e.cs.BatchV1().Jobs("default").Get(ctx, "shards", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(conditionTypes(job)).To(ContainElement(batchv1.JobFailed))
	}, safetyTimeout, poll).Should(Succeed())

	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobFailureTarget, batchv1.JobFailed}))
	for _, c := range job.Status.Conditions {
		g.Expect(c.Reason).To(Equal(batchv1.JobReasonFailedIndexes))
		g.Expect(c.Message).To(Equal("Job has failed indexes"))
	}
	g.Expect(job.Status.FailedIndexes).To(HaveValue(Equal("1,3")))
	g.Expect(job.Status.CompletedIndexes).To(Equal("0,2"))
	g.Expect(job.Status.Succeeded).To(BeEquivalentTo(2))
	g.Expect(job.Status.Failed).To(BeEquivalentTo(4))
	byIndex := map[string][]corev1.Pod{}
	for _, p := range jobPods(g, e, "shards") {
		g.Expect(p.Finalizers).NotTo(ContainElement(batchv1.JobTrackingFinalizer), p.Name)
		ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		byIndex[ix] = append(byIndex[ix], p)
	}
	for _, ix := range []string{"0", "2"} {
		g.Expect(byIndex[ix]).To(HaveLen(1), ix)
		g.Expect(byIndex[ix][0].Annotations).To(HaveKeyWithValue(batchv1.JobIndexFailureCountAnnotation, "0"))
	}
	for _, ix := range []string{"1", "3"} {
		pods := byIndex[ix]
		g.Expect(pods).To(HaveLen(2), ix)
		g.Expect(pods[0].Annotations).To(HaveKeyWithValue(batchv1.JobIndexFailureCountAnnotation, "0"))
		g.Expect(pods[1].Annotations).To(HaveKeyWithValue(batchv1.JobIndexFailureCountAnnotation, "1"))
		for _, p := range pods {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodFailed), p.Name)
		}
		// The index's back-off: 1 s after its first failure.
		failedAt := pods[0].Status.ContainerStatuses[0].State.Terminated.FinishedAt
		g.Expect(pods[1].CreationTimestamp.Sub(failedAt.Time)).To(BeNumerically(">=", time.Second), ix)
	}
}

// TestIndexedJobMaxFailedIndexes: a FailIndex rule fails a pod's index at once, whatever
// backoffLimitPerIndex allows; past maxFailedIndexes (1) the Job fails with
// MaxFailedIndexesExceeded, without running the indexes left.
func TestIndexedJobMaxFailedIndexes(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	job := runJob(e, "capped", "  completionMode: Indexed\n  completions: 4\n  parallelism: 1\n  backoffLimitPerIndex: 2\n  maxFailedIndexes: 1\n"+
		"  podFailurePolicy:\n    rules:\n    - action: FailIndex\n      onExitCodes: {operator: In, values: [42]}\n", "Never", "42", "failed")
	g.Expect(conditionTypes(job)).To(Equal([]batchv1.JobConditionType{batchv1.JobFailureTarget, batchv1.JobFailed}))
	for _, c := range job.Status.Conditions {
		g.Expect(c.Reason).To(Equal(batchv1.JobReasonMaxFailedIndexesExceeded))
		g.Expect(c.Message).To(Equal("Job has exceeded the specified maximal number of failed indexes"))
	}
	g.Expect(job.Status.FailedIndexes).To(HaveValue(Equal("0,1")))
	g.Expect(job.Status.CompletedIndexes).To(BeEmpty())
	g.Expect(job.Status.Failed).To(BeEquivalentTo(2))
	pods := jobPods(g, e, "capped")
	g.Expect(pods).To(HaveLen(2), "one pod per failed index")
	for i, p := range pods {
		g.Expect(p.Annotations).To(HaveKeyWithValue(batchv1.JobCompletionIndexAnnotation, strconv.Itoa(i)))
		g.Expect(p.Annotations).To(HaveKeyWithValue(batchv1.JobIndexFailureCountAnnotation, "0"))
	}
}

// activeJobPods: the Job's pods that are neither finished nor being deleted.
func activeJobPods(g Gomega, e *env, job string) []corev1.Pod {
	var active []corev1.Pod
	for _, p := range jobPods(g, e, job) {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			active = append(active, p)
		}
	}
	return active
}

// TestJobSuspendAndParallelism: a lowered parallelism deletes the excess running pods, and
// suspending deletes them all, as upstream's manageJob; the controller removes their tracking
// finalizer first, so none counts as failed and resuming replaces them at once (the failure
// back-off here is an hour). JobSuspended is True (JobSuspended) while suspended and startTime
// cleared, False (JobResumed) once resumed with startTime reset. An Indexed Job scaled down
// (completions with parallelism) loses the pods of the indexes past completions.
func TestJobSuspendAndParallelism(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	e.sim.Configure("test", simulate.ClusterOptions{JobRunTime: time.Hour})
	e.sim.SetPodFailureBackoff(time.Hour)
	ctx := context.Background()
	getJob := func(g Gomega, name string) *batchv1.Job {
		job, err := e.cs.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return job
	}
	e.kubectl(true, "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: batch\nspec:\n  completions: 6\n  parallelism: 3\n"+
		"  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: task\n        image: busybox\n", "apply", "-f", "-")
	g.Eventually(func(g Gomega) {
		job := getJob(g, "batch")
		g.Expect(job.Status.Active).To(BeEquivalentTo(3))
		g.Expect(job.Status.Ready).To(HaveValue(BeEquivalentTo(3)))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	started := getJob(g, "batch").Status.StartTime
	g.Expect(started).NotTo(BeNil())

	e.kubectl(true, "", "patch", "job/batch", "--type=merge", "-p", `{"spec":{"parallelism":1}}`)
	g.Eventually(func(g Gomega) {
		g.Expect(activeJobPods(g, e, "batch")).To(HaveLen(1))
		job := getJob(g, "batch")
		g.Expect(job.Status.Active).To(BeEquivalentTo(1))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) []corev1.Pod { return jobPods(g, e, "batch") }, 30*time.Second, 100*time.Millisecond).Should(HaveLen(1),
		"the removed pods, without their finalizer, are gone once terminated")
	g.Consistently(func(g Gomega) []corev1.Pod { return activeJobPods(g, e, "batch") }, time.Second, 100*time.Millisecond).Should(HaveLen(1),
		"no replacement for a pod the controller removed")

	e.kubectl(true, "", "patch", "job/batch", "--type=merge", "-p", `{"spec":{"suspend":true}}`)
	g.Eventually(func(g Gomega) {
		job := getJob(g, "batch")
		g.Expect(job.Status.Active).To(BeZero())
		g.Expect(job.Status.StartTime).To(BeNil(), "suspending clears startTime")
		g.Expect(job.Status.Conditions).To(ContainElement(And(HaveField("Type", batchv1.JobSuspended), HaveField("Status", corev1.ConditionTrue),
			HaveField("Reason", "JobSuspended"), HaveField("Message", "Job suspended"))))
		g.Expect(jobPods(g, e, "batch")).To(BeEmpty())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	job := getJob(g, "batch")
	g.Expect(job.Status.Failed).To(BeZero(), "pods the controller removed are not failures")
	g.Expect(job.Status.UncountedTerminatedPods).To(Or(BeNil(), HaveField("Failed", BeEmpty())))

	e.kubectl(true, "", "patch", "job/batch", "--type=merge", "-p", `{"spec":{"suspend":false,"parallelism":2}}`)
	g.Eventually(func(g Gomega) {
		job := getJob(g, "batch")
		g.Expect(job.Status.Active).To(BeEquivalentTo(2))
		g.Expect(job.Status.Conditions).To(ContainElement(And(HaveField("Type", batchv1.JobSuspended), HaveField("Status", corev1.ConditionFalse),
			HaveField("Reason", "JobResumed"), HaveField("Message", "Job resumed"))))
		g.Expect(job.Status.StartTime).NotTo(BeNil())
		g.Expect(job.Status.StartTime.Time).To(BeTemporally(">=", started.Time))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), "resumed at once: no failure back-off")
	g.Expect(getJob(g, "batch").Status.Failed).To(BeZero())

	// Elastic Indexed Job: completions and parallelism 4 → 2.
	e.kubectl(true, "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: shards\nspec:\n  completionMode: Indexed\n  completions: 4\n  parallelism: 4\n"+
		"  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: task\n        image: busybox\n", "apply", "-f", "-")
	g.Eventually(func(g Gomega) []corev1.Pod { return activeJobPods(g, e, "shards") }, 30*time.Second, 100*time.Millisecond).Should(HaveLen(4))
	e.kubectl(true, "", "patch", "job/shards", "--type=merge", "-p", `{"spec":{"completions":2,"parallelism":2}}`)
	g.Eventually(func(g Gomega) []string {
		var indexes []string
		for _, p := range activeJobPods(g, e, "shards") {
			indexes = append(indexes, p.Annotations[batchv1.JobCompletionIndexAnnotation])
		}
		sort.Strings(indexes)
		return indexes
	}, 30*time.Second, 100*time.Millisecond).Should(Equal([]string{"0", "1"}))
	g.Expect(getJob(g, "shards").Status.Failed).To(BeZero())
}
