package simulate_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

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
