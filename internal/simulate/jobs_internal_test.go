package simulate

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCompletedIndexesForm: upstream's compressed intervals, and back.
func TestCompletedIndexesForm(t *testing.T) {
	for _, tc := range []struct {
		set  []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1}, "0,1"},
		{[]int{0, 1, 2, 3, 5}, "0-3,5"},
		{[]int{1, 3, 4, 5, 7, 8}, "1,3-5,7,8"},
	} {
		set := map[int]bool{}
		for _, ix := range tc.set {
			set[ix] = true
		}
		if got := formatIndexes(set); got != tc.want {
			t.Errorf("formatIndexes(%v) = %q, want %q", tc.set, got, tc.want)
		}
		if got := parseIndexes(tc.want, 100); len(got) != len(tc.set) {
			t.Errorf("parseIndexes(%q) = %v, want %v", tc.want, got, tc.set)
		}
	}
}

// TestPodFailureAction: upstream's rule matching: rules in order, onExitCodes on terminated
// containers (then init containers) with a code other than 0, of the named container only
// with containerName; onPodConditions by type and status (True when the pattern names none).
func TestPodFailureAction(t *testing.T) {
	terminated := func(name string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	pod := func(containers, inits []corev1.ContainerStatus, conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
			Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: containers, InitContainerStatuses: inits, Conditions: conds}}
	}
	exitCodes := func(action batchv1.PodFailurePolicyAction, container string, op batchv1.PodFailurePolicyOnExitCodesOperator, values ...int32) batchv1.PodFailurePolicyRule {
		r := batchv1.PodFailurePolicyRule{Action: action, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: op, Values: values}}
		if container != "" {
			r.OnExitCodes.ContainerName = &container
		}
		return r
	}
	disruption := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}
	in, notIn := batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyOnExitCodesOpNotIn
	failJob, count, failIndex := batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyActionFailIndex
	for _, tc := range []struct {
		name       string
		rules      []batchv1.PodFailurePolicyRule
		pod        *corev1.Pod
		wantAction batchv1.PodFailurePolicyAction
		wantMsg    string
	}{
		{"no rule matches", []batchv1.PodFailurePolicyRule{exitCodes(failJob, "", in, 1)}, pod([]corev1.ContainerStatus{terminated("a", 2)}, nil), "", ""},
		{"In", []batchv1.PodFailurePolicyRule{exitCodes(failJob, "", in, 1, 2)}, pod([]corev1.ContainerStatus{terminated("a", 2)}, nil),
			failJob, "Container a for pod ns/p failed with exit code 2 matching FailJob rule at index 0"},
		{"NotIn never matches 0", []batchv1.PodFailurePolicyRule{exitCodes(failJob, "", notIn, 1)}, pod([]corev1.ContainerStatus{terminated("a", 0)}, nil), "", ""},
		{"the first rule wins", []batchv1.PodFailurePolicyRule{exitCodes(count, "", in, 3), exitCodes(failJob, "", notIn, 0)},
			pod([]corev1.ContainerStatus{terminated("a", 3)}, nil), count, ""},
		{"containerName", []batchv1.PodFailurePolicyRule{exitCodes(failIndex, "b", in, 3)},
			pod([]corev1.ContainerStatus{terminated("a", 3), terminated("b", 4)}, nil), "", ""},
		{"init containers", []batchv1.PodFailurePolicyRule{exitCodes(failJob, "init", notIn, 0)},
			pod(nil, []corev1.ContainerStatus{terminated("init", 5)}), failJob, "Container init for pod ns/p failed with exit code 5 matching FailJob rule at index 0"},
		{"running containers have no exit code", []batchv1.PodFailurePolicyRule{exitCodes(failJob, "", notIn, 0)},
			pod([]corev1.ContainerStatus{{Name: "a", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}, nil), "", ""},
		{"DisruptionTarget True by default", []batchv1.PodFailurePolicyRule{exitCodes(count, "", in, 9), disruption},
			pod(nil, nil, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}), batchv1.PodFailurePolicyActionIgnore, ""},
		{"condition status", []batchv1.PodFailurePolicyRule{disruption},
			pod(nil, nil, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse}), "", ""},
		{"FailJob on a condition", []batchv1.PodFailurePolicyRule{{Action: failJob, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}},
			pod(nil, nil, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}), failJob, "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0"},
	} {
		action, msg := podFailureAction(&batchv1.PodFailurePolicy{Rules: tc.rules}, tc.pod)
		if action != tc.wantAction || msg != tc.wantMsg {
			t.Errorf("%s: got %q %q, want %q %q", tc.name, action, msg, tc.wantAction, tc.wantMsg)
		}
	}
}

// TestReplacementFailureCounts: an index's new pod carries the failure counts of the pod it
// replaces plus that pod's own failure, counted or ignored; a deleted pod that has not failed
// is no failure yet once a podFailurePolicy waits for the Failed phase.
func TestReplacementFailureCounts(t *testing.T) {
	job := &batchv1.Job{Spec: batchv1.JobSpec{PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}}}}}
	replaced := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{batchv1.JobIndexFailureCountAnnotation: "2"}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	next := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
	inheritFailureCounts(next, job, replaced)
	if got := next.Annotations; got[batchv1.JobIndexFailureCountAnnotation] != "3" || got[batchv1.JobIndexIgnoredFailureCountAnnotation] != "" {
		t.Errorf("counted failure: %v", got)
	}
	replaced.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
	inheritFailureCounts(next, job, replaced)
	if got := next.Annotations; got[batchv1.JobIndexFailureCountAnnotation] != "2" || got[batchv1.JobIndexIgnoredFailureCountAnnotation] != "1" {
		t.Errorf("ignored failure: %v", got)
	}
	deleted := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if isPodFailed(deleted, job) {
		t.Error("with a podFailurePolicy a terminating pod is not failed until Failed")
	}
	if !isPodFailed(deleted, &batchv1.Job{}) {
		t.Error("without one it is")
	}
}
