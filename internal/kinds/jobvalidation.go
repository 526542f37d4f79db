package kinds

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// Upstream's Job validation (pkg/apis/batch/validation and pkg/registry/batch/job, 1.36),
// over the v1 types: the same rules, field paths and messages, so a Job kube-apiserver refuses
// is refused here with the same 422. The pod template gets only the checks the simulated
// controllers need (containers, labels, restartPolicy), not upstream's whole pod validation.

const (
	maxParallelismForIndexedJob             = 100000
	maxFailedIndexesForIndexedJob           = 100_000
	completionsSoftLimit                    = 100_000
	parallelismLimitForHighCompletions      = 10_000
	maxFailedIndexesLimitForHighCompletions = 10_000
	maxPodFailurePolicyRules                = 20
	maxPodFailurePolicyOnExitCodesValues    = 255
	maxPodFailurePolicyOnPodConditions      = 20
	maxManagedByLength                      = 63
	maxSuccessPolicySucceededIndexes        = 64 * 1024
	maxSuccessPolicyRules                   = 20
)

var (
	podFailurePolicyActions = []batchv1.PodFailurePolicyAction{batchv1.PodFailurePolicyActionCount,
		batchv1.PodFailurePolicyActionFailIndex, batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionIgnore}
	onExitCodesOperators = []batchv1.PodFailurePolicyOnExitCodesOperator{batchv1.PodFailurePolicyOnExitCodesOpIn,
		batchv1.PodFailurePolicyOnExitCodesOpNotIn}
	onPodConditionsStatuses = []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionUnknown}
	podReplacementPolicies  = []batchv1.PodReplacementPolicy{batchv1.Failed, batchv1.TerminatingOrFailed}
)

func (s jobStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.base.Validate(ctx, obj), validateJob(obj.(*batchv1.Job), true)...)
}

// ValidateUpdate is upstream's ValidateJob and ValidateJobUpdate (rest.BeforeUpdate validates
// the metadata). The stored Job is compared with its defaults, as upstream reads it; an update
// that leaves the spec as stored is not judged again (no Job upstream stores fails its rules, but
// one stored before Goofy had them may, and must still take metadata changes such as the
// garbage collector's).
func (jobStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	j, o := obj.(*batchv1.Job), defaultedJob(old)
	if apiequality.Semantic.DeepEqual(j.Spec, o.Spec) {
		return nil
	}
	// Jobs created before the batch.kubernetes.io/ labels are not held to them.
	_, hadName := o.Spec.Template.Labels[batchv1.JobNameLabel]
	_, hadUID := o.Spec.Template.Labels[batchv1.ControllerUidLabel]
	errs := validateJob(j, hadName && hadUID)
	// Upstream's ValidateJobUpdate runs ValidateJobSpec a second time: its errors are causes twice
	// in the 422 (once in the message, which leaves out repeats).
	errs = append(errs, validateJobSpec(&j.Spec, specPath)...)
	return append(errs, validateJobSpecUpdate(&j.Spec, o)...)
}

// validateJob is upstream's ValidateJob after the metadata.
func validateJob(j *batchv1.Job, prefixedLabels bool) field.ErrorList {
	errs := validateGeneratedSelector(j, prefixedLabels)
	errs = append(errs, validateJobSpec(&j.Spec, specPath)...)
	if ptr.Deref(j.Spec.CompletionMode, "") == batchv1.IndexedCompletion && ptr.Deref(j.Spec.Completions, 0) > 0 {
		// An Indexed Job's pods are named <job>-<index> as hostname.
		hostname := fmt.Sprintf("%s-%d", j.Name, *j.Spec.Completions-1)
		if len(validation.IsDNS1123Label(hostname)) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), j.Name,
				"will not able to create pod with invalid DNS label: "+hostname))
		}
	}
	return errs
}

// validateGeneratedSelector: without manualSelector the template must carry the generated
// labels and the selector must select them.
func validateGeneratedSelector(j *batchv1.Job, prefixedLabels bool) field.ErrorList {
	if ptr.Deref(j.Spec.ManualSelector, false) || j.Spec.Selector == nil {
		return nil
	}
	var errs field.ErrorList
	if j.UID == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "uid"), ""))
	}
	meta := specPath.Child("template", "metadata")
	uid, name := string(j.UID), j.Name
	errs = append(errs, hasLabel(j.Spec.Template.Labels, meta, legacyControllerUIDLabel, uid)...)
	errs = append(errs, hasLabel(j.Spec.Template.Labels, meta, legacyJobNameLabel, name)...)
	expected := labels.Set{legacyControllerUIDLabel: uid, legacyJobNameLabel: name}
	if prefixedLabels {
		errs = append(errs, hasLabel(j.Spec.Template.Labels, meta, batchv1.ControllerUidLabel, uid)...)
		errs = append(errs, hasLabel(j.Spec.Template.Labels, meta, batchv1.JobNameLabel, name)...)
		expected[batchv1.ControllerUidLabel], expected[batchv1.JobNameLabel] = uid, name
	}
	if sel, err := metav1.LabelSelectorAsSelector(j.Spec.Selector); err == nil && !sel.Matches(expected) {
		errs = append(errs, field.Invalid(specPath.Child("selector"), j.Spec.Selector, "`selector` not auto-generated"))
	}
	return errs
}

// hasLabel is upstream's ValidateHasLabel.
func hasLabel(l map[string]string, meta *field.Path, key, want string) field.ErrorList {
	got, found := l[key]
	switch {
	case !found:
		return field.ErrorList{field.Required(meta.Child("labels").Key(key), fmt.Sprintf("must be '%s'", want))}
	case got != want:
		return field.ErrorList{field.Invalid(meta.Child("labels").Key(key), l, fmt.Sprintf("must be '%s'", want))}
	}
	return nil
}

// validateJobSpec is upstream's ValidateJobSpec: the spec's own rules, then the selector.
func validateJobSpec(spec *batchv1.JobSpec, path *field.Path) field.ErrorList {
	errs := validateJobSpecFields(spec, path)
	if spec.Selector == nil {
		errs = append(errs, field.Required(path.Child("selector"), ""))
	} else {
		errs = append(errs, metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, path.Child("selector"))...)
	}
	if sel, err := metav1.LabelSelectorAsSelector(spec.Selector); err == nil && !sel.Matches(labels.Set(spec.Template.Labels)) {
		errs = append(errs, field.Invalid(path.Child("template", "metadata", "labels"), spec.Template.Labels, "`selector` does not match template `labels`"))
	}
	return errs
}

func nonNegativeField(v *int32, path *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	return apimachineryvalidation.ValidateNonnegativeField(int64(*v), path)
}

// validateJobSpecFields is upstream's validateJobSpec.
func validateJobSpecFields(spec *batchv1.JobSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, nonNegativeField(spec.Parallelism, path.Child("parallelism"))...)
	errs = append(errs, nonNegativeField(spec.Completions, path.Child("completions"))...)
	if spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, apimachineryvalidation.ValidateNonnegativeField(*spec.ActiveDeadlineSeconds, path.Child("activeDeadlineSeconds"))...)
	}
	errs = append(errs, nonNegativeField(spec.BackoffLimit, path.Child("backoffLimit"))...)
	errs = append(errs, nonNegativeField(spec.TTLSecondsAfterFinished, path.Child("ttlSecondsAfterFinished"))...)
	errs = append(errs, nonNegativeField(spec.BackoffLimitPerIndex, path.Child("backoffLimitPerIndex"))...)
	if spec.MaxFailedIndexes != nil {
		errs = append(errs, nonNegativeField(spec.MaxFailedIndexes, path.Child("maxFailedIndexes"))...)
		if spec.BackoffLimitPerIndex == nil {
			errs = append(errs, field.Required(path.Child("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
		}
	}
	if spec.ManagedBy != nil {
		errs = append(errs, validation.IsDomainPrefixedPath(path.Child("managedBy"), *spec.ManagedBy)...)
		if len(*spec.ManagedBy) > maxManagedByLength {
			errs = append(errs, field.TooLong(path.Child("managedBy"), "", maxManagedByLength))
		}
	}
	indexed := ptr.Deref(spec.CompletionMode, batchv1.NonIndexedCompletion) == batchv1.IndexedCompletion
	if spec.CompletionMode != nil {
		if m := *spec.CompletionMode; m != batchv1.NonIndexedCompletion && m != batchv1.IndexedCompletion {
			errs = append(errs, field.NotSupported(path.Child("completionMode"), spec.CompletionMode,
				[]batchv1.CompletionMode{batchv1.NonIndexedCompletion, batchv1.IndexedCompletion}))
		}
		if indexed {
			errs = append(errs, validateIndexedJobBounds(spec, path)...)
		}
	}
	if !indexed {
		if spec.BackoffLimitPerIndex != nil {
			errs = append(errs, field.Invalid(path.Child("backoffLimitPerIndex"), *spec.BackoffLimitPerIndex, "requires indexed completion mode"))
		}
		if spec.MaxFailedIndexes != nil {
			errs = append(errs, field.Invalid(path.Child("maxFailedIndexes"), *spec.MaxFailedIndexes, "requires indexed completion mode"))
		}
	}
	if spec.PodFailurePolicy != nil {
		errs = append(errs, validatePodFailurePolicy(spec, path.Child("podFailurePolicy"))...)
	}
	if spec.SuccessPolicy != nil {
		if !indexed {
			errs = append(errs, field.Invalid(path.Child("successPolicy"), upstreamSuccessPolicy(spec.SuccessPolicy), "requires indexed completion mode"))
		} else {
			errs = append(errs, validateSuccessPolicy(spec, path.Child("successPolicy"))...)
		}
	}
	if p := spec.PodReplacementPolicy; p != nil {
		if spec.PodFailurePolicy != nil {
			if *p != batchv1.Failed {
				errs = append(errs, field.NotSupported(path.Child("podReplacementPolicy"), *p, []batchv1.PodReplacementPolicy{batchv1.Failed}))
			}
		} else if !slices.Contains(podReplacementPolicies, *p) {
			errs = append(errs, field.NotSupported(path.Child("podReplacementPolicy"), *p, podReplacementPolicies))
		}
	}
	errs = append(errs, validateJobPodTemplate(&spec.Template, path.Child("template"))...)
	rp := path.Child("template", "spec", "restartPolicy")
	switch policy := spec.Template.Spec.RestartPolicy; {
	case policy == corev1.RestartPolicyAlways || policy == "":
		errs = append(errs, field.Required(rp, fmt.Sprintf("valid values: %q, %q", corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)))
	case policy != corev1.RestartPolicyOnFailure && policy != corev1.RestartPolicyNever:
		errs = append(errs, field.NotSupported(rp, policy, []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}))
	case spec.PodFailurePolicy != nil && policy != corev1.RestartPolicyNever:
		errs = append(errs, field.Invalid(rp, policy, fmt.Sprintf("only %q is supported when podFailurePolicy is specified", corev1.RestartPolicyNever)))
	}
	return errs
}

// validateIndexedJobBounds: an Indexed Job's completions, parallelism and maxFailedIndexes.
func validateIndexedJobBounds(spec *batchv1.JobSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.Completions == nil {
		errs = append(errs, field.Required(path.Child("completions"), "when completion mode is Indexed"))
	}
	if spec.Parallelism != nil && *spec.Parallelism > maxParallelismForIndexedJob {
		errs = append(errs, field.Invalid(path.Child("parallelism"), *spec.Parallelism,
			fmt.Sprintf("must be less than or equal to %d when completion mode is Indexed", maxParallelismForIndexedJob)))
	}
	if spec.Completions != nil && spec.MaxFailedIndexes != nil && *spec.MaxFailedIndexes > *spec.Completions {
		errs = append(errs, field.Invalid(path.Child("maxFailedIndexes"), *spec.MaxFailedIndexes, "must be less than or equal to completions"))
	}
	if spec.MaxFailedIndexes != nil && *spec.MaxFailedIndexes > maxFailedIndexesForIndexedJob {
		errs = append(errs, field.Invalid(path.Child("maxFailedIndexes"), *spec.MaxFailedIndexes,
			fmt.Sprintf("must be less than or equal to %d", maxFailedIndexesForIndexedJob)))
	}
	if spec.Completions != nil && *spec.Completions > completionsSoftLimit && spec.BackoffLimitPerIndex != nil {
		if spec.MaxFailedIndexes == nil {
			errs = append(errs, field.Required(path.Child("maxFailedIndexes"), fmt.Sprintf("must be specified when completions is above %d", completionsSoftLimit)))
		}
		if spec.Parallelism != nil && *spec.Parallelism > parallelismLimitForHighCompletions {
			errs = append(errs, field.Invalid(path.Child("parallelism"), *spec.Parallelism,
				fmt.Sprintf("must be less than or equal to %d when completions are above %d and used with backoff limit per index", parallelismLimitForHighCompletions, completionsSoftLimit)))
		}
		if spec.MaxFailedIndexes != nil && *spec.MaxFailedIndexes > maxFailedIndexesLimitForHighCompletions {
			errs = append(errs, field.Invalid(path.Child("maxFailedIndexes"), *spec.MaxFailedIndexes,
				fmt.Sprintf("must be less than or equal to %d when completions are above %d and used with backoff limit per index", maxFailedIndexesLimitForHighCompletions, completionsSoftLimit)))
		}
	}
	return errs
}

// validateJobPodTemplate is the part of upstream's ValidatePodTemplateSpec the simulated
// controllers depend on: valid labels and at least one container.
func validateJobPodTemplate(t *corev1.PodTemplateSpec, path *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabels(t.Labels, path.Child("labels"))
	if len(t.Spec.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("spec", "containers"), ""))
	}
	return errs
}

func validatePodFailurePolicy(spec *batchv1.JobSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	rules := path.Child("rules")
	if len(spec.PodFailurePolicy.Rules) > maxPodFailurePolicyRules {
		errs = append(errs, field.TooMany(rules, len(spec.PodFailurePolicy.Rules), maxPodFailurePolicyRules))
	}
	containers := sets.New[string]()
	for _, c := range spec.Template.Spec.Containers {
		containers.Insert(c.Name)
	}
	for _, c := range spec.Template.Spec.InitContainers {
		containers.Insert(c.Name)
	}
	for i := range spec.PodFailurePolicy.Rules {
		errs = append(errs, validatePodFailurePolicyRule(spec, &spec.PodFailurePolicy.Rules[i], rules.Index(i), containers)...)
	}
	return errs
}

func validatePodFailurePolicyRule(spec *batchv1.JobSpec, rule *batchv1.PodFailurePolicyRule, path *field.Path, containers sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	action := path.Child("action")
	switch {
	case rule.Action == "":
		errs = append(errs, field.Required(action, fmt.Sprintf("valid values: %q", podFailurePolicyActions)))
	case rule.Action == batchv1.PodFailurePolicyActionFailIndex:
		if spec.BackoffLimitPerIndex == nil {
			errs = append(errs, field.Invalid(action, rule.Action, "requires the backoffLimitPerIndex to be set"))
		}
	case !slices.Contains(podFailurePolicyActions, rule.Action):
		errs = append(errs, field.NotSupported(action, rule.Action, podFailurePolicyActions))
	}
	if rule.OnExitCodes != nil {
		errs = append(errs, validateOnExitCodes(rule.OnExitCodes, path.Child("onExitCodes"), containers)...)
	}
	if len(rule.OnPodConditions) > 0 {
		errs = append(errs, validateOnPodConditions(rule.OnPodConditions, path.Child("onPodConditions"))...)
	}
	if rule.OnExitCodes != nil && len(rule.OnPodConditions) > 0 {
		errs = append(errs, field.Invalid(path, field.OmitValueType{}, "specifying both OnExitCodes and OnPodConditions is not supported"))
	}
	if rule.OnExitCodes == nil && len(rule.OnPodConditions) == 0 {
		errs = append(errs, field.Invalid(path, field.OmitValueType{}, "specifying one of OnExitCodes and OnPodConditions is required"))
	}
	return errs
}

func validateOnPodConditions(patterns []batchv1.PodFailurePolicyOnPodConditionsPattern, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(patterns) > maxPodFailurePolicyOnPodConditions {
		errs = append(errs, field.TooMany(path, len(patterns), maxPodFailurePolicyOnPodConditions))
	}
	for j, p := range patterns {
		for _, msg := range validation.IsQualifiedName(string(p.Type)) {
			errs = append(errs, field.Invalid(path.Index(j).Child("type"), string(p.Type), msg))
		}
		status := path.Index(j).Child("status")
		if p.Status == "" {
			errs = append(errs, field.Required(status, fmt.Sprintf("valid values: %q", onPodConditionsStatuses)))
		} else if !slices.Contains(onPodConditionsStatuses, p.Status) {
			errs = append(errs, field.NotSupported(status, p.Status, onPodConditionsStatuses))
		}
	}
	return errs
}

func validateOnExitCodes(req *batchv1.PodFailurePolicyOnExitCodesRequirement, path *field.Path, containers sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	op := path.Child("operator")
	if req.Operator == "" {
		errs = append(errs, field.Required(op, fmt.Sprintf("valid values: %q", onExitCodesOperators)))
	} else if !slices.Contains(onExitCodesOperators, req.Operator) {
		errs = append(errs, field.NotSupported(op, req.Operator, onExitCodesOperators))
	}
	if req.ContainerName != nil && !containers.Has(*req.ContainerName) {
		errs = append(errs, field.Invalid(path.Child("containerName"), *req.ContainerName, "must be one of the container or initContainer names in the pod template"))
	}
	values := path.Child("values")
	if len(req.Values) == 0 {
		errs = append(errs, field.Invalid(values, req.Values, "at least one value is required"))
	} else if len(req.Values) > maxPodFailurePolicyOnExitCodesValues {
		errs = append(errs, field.TooMany(values, len(req.Values), maxPodFailurePolicyOnExitCodesValues))
	}
	ordered, seen := true, sets.New[int32]()
	for j, v := range req.Values {
		if req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && v == 0 {
			errs = append(errs, field.Invalid(values.Index(j), v, "must not be 0 for the In operator"))
		}
		if seen.Has(v) {
			errs = append(errs, field.Duplicate(values.Index(j), v))
		} else {
			seen.Insert(v)
		}
		if j > 0 && req.Values[j-1] > v {
			ordered = false
		}
	}
	if !ordered {
		errs = append(errs, field.Invalid(values, req.Values, "must be ordered"))
	}
	return errs
}

func validateSuccessPolicy(spec *batchv1.JobSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	rules := path.Child("rules")
	if len(spec.SuccessPolicy.Rules) == 0 {
		errs = append(errs, field.Required(rules, "at least one rules must be specified when the successPolicy is specified"))
	}
	if len(spec.SuccessPolicy.Rules) > maxSuccessPolicyRules {
		errs = append(errs, field.TooMany(rules, len(spec.SuccessPolicy.Rules), maxSuccessPolicyRules))
	}
	completions := ptr.Deref(spec.Completions, 0)
	for i, rule := range spec.SuccessPolicy.Rules {
		rp := rules.Index(i)
		if rule.SucceededCount == nil && rule.SucceededIndexes == nil {
			errs = append(errs, field.Required(rp, "at least one of succeededCount or succeededIndexes must be specified"))
		}
		var total int32
		if rule.SucceededIndexes != nil {
			ip := rp.Child("succeededIndexes")
			if len(*rule.SucceededIndexes) > maxSuccessPolicySucceededIndexes {
				errs = append(errs, field.TooLong(ip, "", maxSuccessPolicySucceededIndexes))
			}
			var err error
			if total, err = validateIndexesFormat(*rule.SucceededIndexes, completions); err != nil {
				errs = append(errs, field.Invalid(ip, *rule.SucceededIndexes, "error parsing succeededIndexes: "+err.Error()))
			}
		}
		if rule.SucceededCount != nil {
			cp := rp.Child("succeededCount")
			errs = append(errs, nonNegativeField(rule.SucceededCount, cp)...)
			if *rule.SucceededCount > completions {
				errs = append(errs, field.Invalid(cp, *rule.SucceededCount, fmt.Sprintf("must be less than or equal to %d (the number of specified completions)", completions)))
			}
			if rule.SucceededIndexes != nil && *rule.SucceededCount > total {
				errs = append(errs, field.Invalid(cp, *rule.SucceededCount, fmt.Sprintf("must be less than or equal to %d (the number of indexes in the specified succeededIndexes field)", total)))
			}
		}
	}
	return errs
}

// validateIndexesFormat parses an interval list such as "0-3,5" (upstream's, with its messages)
// and returns how many indexes it names.
func validateIndexesFormat(indexes string, completions int32) (int32, error) {
	if indexes == "" {
		return 0, nil
	}
	var last *int32
	var total int32
	for _, interval := range strings.Split(indexes, ",") {
		limits := strings.Split(interval, "-")
		if len(limits) > 2 {
			return 0, fmt.Errorf("the fragment %q violates the requirement that an index interval can have at most two parts separated by '-'", interval)
		}
		bounds := make([]int32, len(limits))
		for i, l := range limits {
			n, err := strconv.Atoi(l)
			if err != nil {
				return 0, fmt.Errorf("cannot convert string to integer for index: %q", l)
			}
			if n >= int(completions) {
				return 0, fmt.Errorf("too large index: %q", l)
			}
			bounds[i] = int32(n)
		}
		x, y := bounds[0], bounds[len(bounds)-1]
		if len(bounds) == 2 && x >= y {
			return 0, fmt.Errorf("non-increasing order, previous: %d, current: %d", x, y)
		}
		if last != nil && *last >= x {
			return 0, fmt.Errorf("non-increasing order, previous: %d, current: %d", *last, x)
		}
		total += y - x + 1
		last = &y
	}
	return total, nil
}

// validateJobSpecUpdate is upstream's ValidateJobSpecUpdate past ValidateJobSpec: what a Job may
// not change once created.
func validateJobSpecUpdate(spec *batchv1.JobSpec, old *batchv1.Job) field.ErrorList {
	var errs field.ErrorList
	o := &old.Spec
	if ptr.Deref(spec.CompletionMode, "") != batchv1.IndexedCompletion {
		errs = append(errs, apimachineryvalidation.ValidateImmutableField(spec.Completions, o.Completions, specPath.Child("completions"))...)
	} else if !apiequality.Semantic.DeepEqual(spec.Completions, o.Completions) && spec.Completions != nil &&
		*spec.Completions != ptr.Deref(spec.Parallelism, 0) {
		// Elastic Indexed Jobs scale completions with parallelism.
		errs = append(errs, field.Invalid(specPath.Child("completions"), spec.Completions, "can only be modified in tandem with spec.parallelism"))
	}
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(spec.Selector, o.Selector, specPath.Child("selector"))...)
	errs = append(errs, validateJobTemplateUpdate(spec, old)...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(spec.CompletionMode, o.CompletionMode, specPath.Child("completionMode"))...)
	if !apiequality.Semantic.DeepEqual(spec.PodFailurePolicy, o.PodFailurePolicy) {
		errs = append(errs, field.Invalid(specPath.Child("podFailurePolicy"), upstreamPodFailurePolicy(spec.PodFailurePolicy), apimachineryvalidation.FieldImmutableErrorMsg))
	}
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(spec.BackoffLimitPerIndex, o.BackoffLimitPerIndex, specPath.Child("backoffLimitPerIndex"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(spec.ManagedBy, o.ManagedBy, specPath.Child("managedBy"))...)
	if !apiequality.Semantic.DeepEqual(spec.SuccessPolicy, o.SuccessPolicy) {
		errs = append(errs, field.Invalid(specPath.Child("successPolicy"), upstreamSuccessPolicy(spec.SuccessPolicy), apimachineryvalidation.FieldImmutableErrorMsg))
	}
	return errs
}

// validateJobTemplateUpdate: the pod template is immutable, except that a suspended Job that
// has no active pods and either never started or reports JobSuspended may change its
// scheduling directives (node affinity, nodeSelector, tolerations, schedulingGates, the
// template's labels and annotations) and its containers' resources, as 1.36's
// MutableSchedulingDirectivesForSuspendedJobs and MutablePodResourcesForSuspendedJobs (beta,
// on) allow.
func validateJobTemplateUpdate(spec *batchv1.JobSpec, old *batchv1.Job) field.ErrorList {
	tmpl, oldTmpl := &spec.Template, &old.Spec.Template
	if !mutablePodTemplate(old) {
		return apimachineryvalidation.ValidateImmutableField(tmpl, oldTmpl, specPath.Child("template"))
	}
	oldTmpl = oldTmpl.DeepCopy()
	switch cur, prev := tmpl.Spec.Affinity, oldTmpl.Spec.Affinity; {
	case cur == nil && prev != nil:
		prev.NodeAffinity = nil
		if *prev == (corev1.Affinity{}) {
			oldTmpl.Spec.Affinity = nil
		}
	case cur != nil && prev == nil:
		oldTmpl.Spec.Affinity = &corev1.Affinity{NodeAffinity: cur.NodeAffinity}
	case cur != nil && prev != nil:
		prev.NodeAffinity = cur.NodeAffinity
	}
	oldTmpl.Spec.NodeSelector = tmpl.Spec.NodeSelector
	oldTmpl.Spec.Tolerations = tmpl.Spec.Tolerations
	oldTmpl.Annotations = tmpl.Annotations
	oldTmpl.Labels = tmpl.Labels
	oldTmpl.Spec.SchedulingGates = tmpl.Spec.SchedulingGates
	// Of the pod spec, only the containers' resources may change.
	for _, pair := range [][2][]corev1.Container{{tmpl.Spec.Containers, oldTmpl.Spec.Containers}, {tmpl.Spec.InitContainers, oldTmpl.Spec.InitContainers}} {
		if cur, prev := pair[0], pair[1]; len(cur) == len(prev) {
			for i := range cur {
				if cur[i].Name == prev[i].Name {
					prev[i].Resources = cur[i].Resources
				}
			}
		}
	}
	return apimachineryvalidation.ValidateImmutableField(tmpl.Spec, oldTmpl.Spec, specPath.Child("template.spec"))
}

// mutablePodTemplate is upstream's shouldAllowMutablePodTemplate.
func mutablePodTemplate(j *batchv1.Job) bool {
	suspendedCondition := false
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobSuspended && c.Status == corev1.ConditionTrue {
			suspendedCondition = true
		}
	}
	return ptr.Deref(j.Spec.Suspend, false) && (j.Status.StartTime == nil || suspendedCondition) && j.Status.Active == 0
}

// Upstream validates its internal types, which have no JSON tags: an error's value renders
// with Go's field names ({"Rules":[{"Action":"Ignore",...}]}). These mirror them for the
// policies' values.
type (
	internalPodFailurePolicy struct {
		Rules []internalPodFailurePolicyRule
	}
	internalPodFailurePolicyRule struct {
		Action          batchv1.PodFailurePolicyAction
		OnExitCodes     *internalOnExitCodes
		OnPodConditions []internalOnPodConditionsPattern
	}
	internalOnExitCodes struct {
		ContainerName *string
		Operator      batchv1.PodFailurePolicyOnExitCodesOperator
		Values        []int32
	}
	internalOnPodConditionsPattern struct {
		Type   corev1.PodConditionType
		Status corev1.ConditionStatus
	}
	internalSuccessPolicy     struct{ Rules []internalSuccessPolicyRule }
	internalSuccessPolicyRule struct {
		SucceededIndexes *string
		SucceededCount   *int32
	}
)

func upstreamPodFailurePolicy(p *batchv1.PodFailurePolicy) *internalPodFailurePolicy {
	if p == nil {
		return nil
	}
	out := &internalPodFailurePolicy{Rules: make([]internalPodFailurePolicyRule, 0, len(p.Rules))}
	if p.Rules == nil {
		out.Rules = nil
	}
	for _, r := range p.Rules {
		rule := internalPodFailurePolicyRule{Action: r.Action}
		if c := r.OnExitCodes; c != nil {
			rule.OnExitCodes = &internalOnExitCodes{ContainerName: c.ContainerName, Operator: c.Operator, Values: c.Values}
		}
		if r.OnPodConditions != nil {
			rule.OnPodConditions = make([]internalOnPodConditionsPattern, 0, len(r.OnPodConditions))
		}
		for _, c := range r.OnPodConditions {
			rule.OnPodConditions = append(rule.OnPodConditions, internalOnPodConditionsPattern{Type: c.Type, Status: c.Status})
		}
		out.Rules = append(out.Rules, rule)
	}
	return out
}

func upstreamSuccessPolicy(p *batchv1.SuccessPolicy) *internalSuccessPolicy {
	if p == nil {
		return nil
	}
	out := &internalSuccessPolicy{}
	if p.Rules != nil {
		out.Rules = make([]internalSuccessPolicyRule, 0, len(p.Rules))
	}
	for _, r := range p.Rules {
		out.Rules = append(out.Rules, internalSuccessPolicyRule{SucceededIndexes: r.SucceededIndexes, SucceededCount: r.SucceededCount})
	}
	return out
}
