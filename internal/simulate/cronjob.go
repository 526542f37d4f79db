package simulate

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// cronJobController is kube-controller-manager's CronJob controller: at each time its schedule
// (standard cron syntax, in spec.timeZone) names, a Job <name>-<minutes since the epoch> from
// the job template, within startingDeadlineSeconds, per concurrencyPolicy (Allow, Forbid,
// Replace) and unless suspended; status.active, lastScheduleTime and lastSuccessfulTime; the
// finished Jobs beyond the history limits are deleted.
type cronJobController struct {
	c   *cluster
	idx int
}

var (
	cronJobsGR  = batchv1.SchemeGroupVersion.WithResource("cronjobs").GroupResource()
	cronJobKind = batchv1.SchemeGroupVersion.WithKind("CronJob")
)

// maxMissedSchedules: past this many missed times the controller starts only the latest, as
// upstream (which also reports TooManyMissedTimes).
const maxMissedSchedules = 100

func newCronJobController(c *cluster, idx int) *cronJobController {
	return &cronJobController{c: c, idx: idx}
}

func (cj *cronJobController) resources() []schema.GroupResource {
	return []schema.GroupResource{cronJobsGR, jobsGR}
}

func (cj *cronJobController) observe(ch store.Change) {
	obj := changedObject(ch)
	if ch.Resource == cronJobsGR {
		cj.c.enqueue(cj.idx, keyOf(obj))
		return
	}
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ref.Kind == "CronJob" {
		cj.c.enqueue(cj.idx, obj.GetNamespace()+"/"+ref.Name)
	}
}

func jobFinished(j *batchv1.Job) (bool, batchv1.JobConditionType) {
	for _, t := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		if jobCondition(j, t) != nil {
			return true, t
		}
	}
	return false, ""
}

func (cj *cronJobController) sync(ctx context.Context, key string) error {
	cronJob, _ := cj.c.cache.get(cronJobsGR, key).(*batchv1.CronJob)
	if cronJob == nil || cronJob.DeletionTimestamp != nil {
		return nil
	}
	loc := time.Local
	if tz := ptr.Deref(cronJob.Spec.TimeZone, ""); tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil {
			return nil // upstream reports UnknownTimeZone and waits for a fix
		}
	}
	sched, err := cronParser.Parse(cronJob.Spec.Schedule)
	if err != nil {
		return nil // upstream reports UnparseableSchedule
	}
	now := time.Now()
	var active, succeeded, failed []*batchv1.Job
	for _, obj := range cj.c.cache.owned(jobsGR, cronJob.UID) {
		j := obj.(*batchv1.Job)
		switch done, how := jobFinished(j); {
		case !done:
			active = append(active, j)
		case how == batchv1.JobComplete:
			succeeded = append(succeeded, j)
		default:
			failed = append(failed, j)
		}
	}
	st := cronJob.Status.DeepCopy()
	st.Active = nil
	for _, j := range active {
		st.Active = append(st.Active, corev1.ObjectReference{Kind: "Job", Namespace: j.Namespace, Name: j.Name, UID: j.UID, APIVersion: "batch/v1", ResourceVersion: j.ResourceVersion})
	}
	for _, j := range succeeded {
		if j.Status.CompletionTime != nil && (st.LastSuccessfulTime == nil || st.LastSuccessfulTime.Before(j.Status.CompletionTime)) {
			st.LastSuccessfulTime = j.Status.CompletionTime
		}
	}
	if !ptr.Deref(cronJob.Spec.Suspend, false) {
		if scheduled, ok := cj.due(cronJob, sched, loc, now); ok {
			started, err := cj.start(ctx, cronJob, scheduled, active)
			if err != nil {
				return err
			}
			if started {
				t := metav1.NewTime(scheduled)
				st.LastScheduleTime = &t
			}
		}
	}
	if err := cj.trim(ctx, succeeded, int(ptr.Deref(cronJob.Spec.SuccessfulJobsHistoryLimit, 3))); err != nil {
		return err
	}
	if err := cj.trim(ctx, failed, int(ptr.Deref(cronJob.Spec.FailedJobsHistoryLimit, 1))); err != nil {
		return err
	}
	// Look again at the next scheduled time.
	cj.c.after(time.Until(sched.Next(now.In(loc)))+10*time.Millisecond, cj.idx, key)
	if apiequality.Semantic.DeepEqual(st, &cronJob.Status) {
		return nil
	}
	next := cronJob.DeepCopy()
	next.Status = *st
	return cj.c.client.Status().Update(ctx, next)
}

// cronParser reads standard five-field schedules and the @-descriptors, as upstream's.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// due returns the most recent scheduled time not yet started, if it is within the starting
// deadline.
func (cj *cronJobController) due(c *batchv1.CronJob, sched cron.Schedule, loc *time.Location, now time.Time) (time.Time, bool) {
	from := c.CreationTimestamp.Time
	if c.Status.LastScheduleTime != nil {
		from = c.Status.LastScheduleTime.Time
	}
	var latest time.Time
	missed := 0
	for t := sched.Next(from.In(loc)); !t.After(now); t = sched.Next(t) {
		latest = t
		if missed++; missed > maxMissedSchedules {
			// Skip ahead: only the latest of very many missed times matters.
			for n := sched.Next(t); !n.After(now); n = sched.Next(n) {
				latest = n
			}
			break
		}
	}
	if latest.IsZero() {
		return time.Time{}, false
	}
	if d := c.Spec.StartingDeadlineSeconds; d != nil && latest.Add(time.Duration(*d)*time.Second).Before(now) {
		return time.Time{}, false // missed its starting window
	}
	return latest, true
}

// start creates the Job of a scheduled time, as concurrencyPolicy allows; it reports whether
// the time counts as scheduled.
func (cj *cronJobController) start(ctx context.Context, c *batchv1.CronJob, scheduled time.Time, active []*batchv1.Job) (bool, error) {
	switch c.Spec.ConcurrencyPolicy {
	case batchv1.ForbidConcurrent:
		if len(active) > 0 {
			return false, nil
		}
	case batchv1.ReplaceConcurrent:
		for _, j := range active {
			if err := cj.c.client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !isGone(err) {
				return false, err
			}
		}
	}
	tmpl := c.Spec.JobTemplate.DeepCopy()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            fmt.Sprintf("%s-%d", c.Name, scheduled.Unix()/60),
			Namespace:       c.Namespace,
			Labels:          tmpl.Labels,
			Annotations:     tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(c, cronJobKind)},
		},
		Spec: tmpl.Spec,
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[batchv1.CronJobScheduledTimestampAnnotation] = scheduled.In(time.UTC).Format(time.RFC3339)
	// Already there: an earlier sync started it (its name is the scheduled time's).
	if err := cj.c.client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	return true, nil
}

// trim deletes the oldest finished Jobs beyond limit.
func (cj *cronJobController) trim(ctx context.Context, jobs []*batchv1.Job, limit int) error {
	if len(jobs) <= limit {
		return nil
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].CreationTimestamp.Before(&jobs[j].CreationTimestamp) })
	for _, j := range jobs[:len(jobs)-limit] {
		if err := cj.c.client.Delete(ctx, j, client.Preconditions{UID: &j.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !isGone(err) {
			return err
		}
	}
	return nil
}
