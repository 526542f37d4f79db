package kinds

import (
	"math"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func testJob(mutate func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "default"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "task", Image: "busybox"}}}}}}
	if mutate != nil {
		mutate(j)
	}
	return j
}

func indexed(n int32) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Spec.CompletionMode, j.Spec.Completions = ptr.To(batchv1.IndexedCompletion), ptr.To(n)
	}
}

func exitCodes(op batchv1.PodFailurePolicyOnExitCodesOperator, action batchv1.PodFailurePolicyAction, values ...int32) *batchv1.PodFailurePolicy {
	return &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: action,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: op, Values: values}}}}
}

// TestJobDefaults: upstream's SetDefaults_Job, and the generated selector and labels.
func TestJobDefaults(t *testing.T) {
	g := NewWithT(t)
	j := testJob(nil)
	g.Expect(created(t, j)).To(Succeed())
	g.Expect(j.Spec.BackoffLimit).To(HaveValue(BeEquivalentTo(6)))
	g.Expect(j.Spec.Completions).To(HaveValue(BeEquivalentTo(1)))
	g.Expect(j.Spec.Parallelism).To(HaveValue(BeEquivalentTo(1)))
	g.Expect(j.Spec.CompletionMode).To(HaveValue(Equal(batchv1.NonIndexedCompletion)))
	g.Expect(j.Spec.Suspend).To(HaveValue(BeFalse()))
	g.Expect(j.Spec.ManualSelector).To(HaveValue(BeFalse()))
	g.Expect(j.Spec.PodReplacementPolicy).To(HaveValue(Equal(batchv1.TerminatingOrFailed)))
	g.Expect(j.Spec.Template.Spec.TerminationGracePeriodSeconds).To(HaveValue(BeEquivalentTo(30)), "the template's pod defaults")
	g.Expect(j.Spec.Selector.MatchLabels).To(Equal(map[string]string{batchv1.ControllerUidLabel: string(j.UID)}))
	g.Expect(j.Spec.Template.Labels).To(Equal(map[string]string{batchv1.ControllerUidLabel: string(j.UID),
		batchv1.JobNameLabel: "j", "controller-uid": string(j.UID), "job-name": "j"}))
	g.Expect(j.Labels).To(Equal(j.Spec.Template.Labels), "a Job without labels shows its template's")

	j = testJob(func(j *batchv1.Job) {
		indexed(3)(j)
		j.Spec.BackoffLimitPerIndex = ptr.To[int32](1)
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}}}
	})
	g.Expect(created(t, j)).To(Succeed())
	g.Expect(j.Spec.BackoffLimit).To(HaveValue(BeEquivalentTo(math.MaxInt32)), "backoffLimitPerIndex leaves the Job's limit unlimited")
	g.Expect(j.Spec.Parallelism).To(HaveValue(BeEquivalentTo(1)))
	g.Expect(j.Spec.PodReplacementPolicy).To(HaveValue(Equal(batchv1.Failed)), "a podFailurePolicy replaces pods once Failed")
	g.Expect(j.Spec.PodFailurePolicy.Rules[0].OnPodConditions[0].Status).To(Equal(corev1.ConditionTrue))

	j = testJob(func(j *batchv1.Job) { j.Spec.Parallelism = ptr.To[int32](2) })
	g.Expect(created(t, j)).To(Succeed())
	g.Expect(j.Spec.Completions).To(BeNil(), "a work queue: completions stay unset when parallelism is set")
}

// TestJobValidation: upstream's rules for the Job's fields, with its paths and messages.
func TestJobValidation(t *testing.T) {
	g := NewWithT(t)
	for name, tc := range map[string]struct {
		mutate func(*batchv1.Job)
		want   []string
	}{
		"restartPolicy unset": {func(j *batchv1.Job) { j.Spec.Template.Spec.RestartPolicy = "" },
			[]string{`spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"`}},
		"podFailurePolicy with OnFailure": {func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			j.Spec.PodFailurePolicy = exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionFailJob, 1)
		}, []string{`spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified`}},
		"backoffLimitPerIndex NonIndexed": {func(j *batchv1.Job) {
			j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = ptr.To[int32](1), ptr.To[int32](1)
		}, []string{"spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode",
			"spec.maxFailedIndexes: Invalid value: 1: requires indexed completion mode"}},
		"maxFailedIndexes bounds": {func(j *batchv1.Job) { indexed(2)(j); j.Spec.MaxFailedIndexes = ptr.To[int32](3) },
			[]string{"spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified",
				"spec.maxFailedIndexes: Invalid value: 3: must be less than or equal to completions"}},
		"negative backoffLimitPerIndex": {func(j *batchv1.Job) { indexed(2)(j); j.Spec.BackoffLimitPerIndex = ptr.To[int32](-1) },
			[]string{"spec.backoffLimitPerIndex: Invalid value: -1: must be greater than or equal to 0"}},
		"FailIndex without backoffLimitPerIndex": {func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionFailIndex, 1)
		}, []string{`spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set`}},
		"exit codes": {func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionFailJob, 0, 3, 2, 2)
			j.Spec.PodFailurePolicy.Rules[0].OnExitCodes.ContainerName = ptr.To("other")
		}, []string{`spec.podFailurePolicy.rules[0].onExitCodes.containerName: Invalid value: "other": must be one of the container or initContainer names in the pod template`,
			"spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator",
			"spec.podFailurePolicy.rules[0].onExitCodes.values[3]: Duplicate value: 2",
			"spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: [0,3,2,2]: must be ordered"}},
		"operator and action": {func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = exitCodes("Has", "Retry", 1)
		}, []string{`spec.podFailurePolicy.rules[0].action: Unsupported value: "Retry": supported values: "Count", "FailIndex", "FailJob", "Ignore"`,
			`spec.podFailurePolicy.rules[0].onExitCodes.operator: Unsupported value: "Has": supported values: "In", "NotIn"`}},
		"both and neither": {func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = exitCodes(batchv1.PodFailurePolicyOnExitCodesOpNotIn, batchv1.PodFailurePolicyActionIgnore, 0)
			j.Spec.PodFailurePolicy.Rules[0].OnPodConditions = []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: "Maybe"}}
			j.Spec.PodFailurePolicy.Rules = append(j.Spec.PodFailurePolicy.Rules, batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionCount})
		}, []string{`spec.podFailurePolicy.rules[0].onPodConditions[0].status: Unsupported value: "Maybe": supported values: "False", "True", "Unknown"`,
			"spec.podFailurePolicy.rules[0]: Invalid value: specifying both OnExitCodes and OnPodConditions is not supported",
			"spec.podFailurePolicy.rules[1]: Invalid value: specifying one of OnExitCodes and OnPodConditions is required"}},
		"21 rules": {func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{}
			for i := range 21 {
				j.Spec.PodFailurePolicy.Rules = append(j.Spec.PodFailurePolicy.Rules, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionCount, int32(i+1)).Rules...)
			}
		}, []string{"spec.podFailurePolicy.rules: Too many: 21: must have at most 20 items"}},
		"podReplacementPolicy with a policy": {func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionCount, 1)
			j.Spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
		}, []string{`spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported values: "Failed"`}},
		"successPolicy": {func(j *batchv1.Job) {
			indexed(3)(j)
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0-5")}, {},
				{SucceededIndexes: ptr.To("0,1"), SucceededCount: ptr.To[int32](3)}}}
		}, []string{`spec.successPolicy.rules[0].succeededIndexes: Invalid value: "0-5": error parsing succeededIndexes: too large index: "5"`,
			"spec.successPolicy.rules[1]: Required value: at least one of succeededCount or succeededIndexes must be specified",
			"spec.successPolicy.rules[2].succeededCount: Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)"}},
		"wrong generated labels": {func(j *batchv1.Job) { j.Spec.Template.Labels = map[string]string{"job-name": "other"} },
			[]string{`spec.template.metadata.labels[job-name]: Invalid value: {"batch.kubernetes.io/controller-uid":`, "must be 'j'"}},
		"Indexed hostname": {func(j *batchv1.Job) {
			indexed(20)(j)
			j.Name = "a123456789012345678901234567890123456789012345678901234567890"
		},
			[]string{"metadata.name: Invalid value: \"a123456789012345678901234567890123456789012345678901234567890\": will not able to create pod with invalid DNS label: a123456789012345678901234567890123456789012345678901234567890-19"}},
	} {
		err := created(t, testJob(tc.mutate))
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", name, err)
		for _, want := range tc.want {
			g.Expect(err.Error()).To(ContainSubstring(want), name)
		}
	}
	g.Expect(created(t, testJob(func(j *batchv1.Job) {
		indexed(4)(j)
		j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = ptr.To[int32](1), ptr.To[int32](2)
		j.Spec.PodFailurePolicy = exitCodes(batchv1.PodFailurePolicyOnExitCodesOpNotIn, batchv1.PodFailurePolicyActionFailIndex, 0)
	}))).To(Succeed())
}

// TestJobUpdateValidation: what a Job may not change once created, and what a suspended Job
// that never started may.
func TestJobUpdateValidation(t *testing.T) {
	g := NewWithT(t)
	j := testJob(indexed(2))
	j.Spec.Parallelism = ptr.To[int32](2)
	g.Expect(created(t, j)).To(Succeed())
	s := strategyOf(t, j)
	update := func(cur *batchv1.Job, mutate func(*batchv1.Job)) error {
		next := cur.DeepCopy()
		mutate(next)
		return updated(t, s, next, cur)
	}
	g.Expect(update(j, func(n *batchv1.Job) { n.Spec.Completions, n.Spec.Parallelism = ptr.To[int32](4), ptr.To[int32](4) })).
		To(Succeed(), "an Indexed Job scales completions with parallelism")
	err := update(j, func(n *batchv1.Job) {
		n.Spec.Completions = ptr.To[int32](4)
		n.Spec.PodFailurePolicy = exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionIgnore, 1)
		n.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
		n.Spec.Template.Spec.Containers[0].Image = "other"
	})
	g.Expect(err).To(MatchError(ContainSubstring("spec.completions: Invalid value: 4: can only be modified in tandem with spec.parallelism")))
	g.Expect(err).To(MatchError(ContainSubstring(`spec.podFailurePolicy: Invalid value: {"Rules":[{"Action":"Ignore","OnExitCodes":{"ContainerName":null,"Operator":"In","Values":[1]},"OnPodConditions":null}]}: field is immutable`)))
	g.Expect(err).To(MatchError(ContainSubstring("spec.template: Invalid value: ")))
	g.Expect(update(j, func(n *batchv1.Job) { n.Spec.BackoffLimit = ptr.To[int32](1); n.Labels = map[string]string{"a": "b"} })).To(Succeed())

	suspended := testJob(func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) })
	g.Expect(created(t, suspended)).To(Succeed())
	g.Expect(update(suspended, func(n *batchv1.Job) {
		n.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "a"}
		n.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1")}
	})).To(Succeed(), "scheduling directives and resources of a suspended Job that never started")
	g.Expect(update(suspended, func(n *batchv1.Job) { n.Spec.Template.Spec.Containers[0].Image = "other" })).
		To(MatchError(ContainSubstring("spec.template.spec: Invalid value: ")))

	// A Job stored before its template had defaults still takes metadata changes.
	old := j.DeepCopy()
	old.Spec.Template.Spec.DNSPolicy, old.Spec.PodReplacementPolicy = "", nil
	next := old.DeepCopy()
	next.Finalizers = []string{"example.com/f"}
	s.Default(next) // as the store defaults every write
	g.Expect(updated(t, s, next, old)).To(Succeed())
	g.Expect(next.Generation).To(Equal(old.Generation), "defaults are not a spec change")
}
