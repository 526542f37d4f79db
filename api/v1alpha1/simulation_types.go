package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Fault injection (docs/faults.md). Every fault is off when its field is absent; each may carry an
// until time after which it stops by itself. A boolean or enumerated fault takes its time from the
// sibling field named <fault>Until, a fault that is an object from its own until field.

// ClusterSimulation holds the faults injected into a simulated workload cluster's endpoint (its API
// server and its etcd members) and the settings of its workloads. They never affect another
// cluster.
type ClusterSimulation struct {
	// unreachable makes the cluster's endpoint refuse new connections and close open ones; the
	// cluster keeps its state and serves it again once the field is removed.
	// +optional
	Unreachable bool `json:"unreachable,omitempty"`

	// unreachableUntil ends unreachable at this time.
	// +optional
	UnreachableUntil *metav1.Time `json:"unreachableUntil,omitempty"`

	// apiServer injects latency and errors into the API server's answers.
	// +optional
	APIServer *APIServerSimulation `json:"apiServer,omitempty"`

	// etcd injects latency, an alarm or the loss of the leader into the etcd members' answers.
	// +optional
	Etcd *EtcdSimulation `json:"etcd,omitempty"`

	// workloads configures what runs in the cluster (docs/workloads.md): the simulated
	// scheduler, kubelets and kube-controller-manager's workload controllers. Not a fault: it
	// does not set FaultsInjected.
	// +optional
	Workloads *WorkloadSimulation `json:"workloads,omitempty"`
}

// WorkloadsMode turns a cluster's workload simulation on or off.
// +kubebuilder:validation:Enum=Enabled;Disabled
type WorkloadsMode string

const (
	// WorkloadsEnabled runs pods: scheduled, started, completed and drained.
	WorkloadsEnabled WorkloadsMode = "Enabled"
	// WorkloadsDisabled is the lighter cluster: no pod is created, scheduled or started, and
	// Deployments and DaemonSets report their rollouts at once.
	WorkloadsDisabled WorkloadsMode = "Disabled"
)

// WorkloadSimulation configures the workloads of one simulated cluster; an absent field keeps
// the manager's flag (--simulate-workloads, --pod-start-delay, --job-run-time).
type WorkloadSimulation struct {
	// mode turns the workload simulation on or off for this cluster. Turned off, the
	// workload controllers stop and leave their objects as they are; turned on again, they
	// take them over as after a restart.
	// +optional
	Mode WorkloadsMode `json:"mode,omitempty"`

	// podStartDelay is how long a kubelet takes from a pod's binding to its containers
	// running, e.g. "2s".
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('1h')",message="podStartDelay must be a duration above 0s and at most 1h"
	PodStartDelay *metav1.Duration `json:"podStartDelay,omitempty"`

	// jobRunTime is how long a Job's pod runs before its containers exit 0, e.g. "30s".
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('24h')",message="jobRunTime must be a duration above 0s and at most 24h"
	JobRunTime *metav1.Duration `json:"jobRunTime,omitempty"`
}

// APIServerSimulation are the faults of the simulated kube-apiserver.
type APIServerSimulation struct {
	// latency is added to every API request; a watch gets it before each event.
	// +optional
	Latency *LatencyFault `json:"latency,omitempty"`

	// errors make a share of the matching requests fail as kube-apiserver fails them. The first
	// rule that matches a request (and draws it) answers it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Errors []APIErrorFault `json:"errors,omitempty"`
}

// LatencyFault delays answers by base plus a uniform random share of it up to jitter
// (jitter 0.5: between base and 1.5 × base).
type LatencyFault struct {
	// base is the added delay, e.g. "200ms".
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('60s')",message="base must be a duration between 0s and 60s"
	Base metav1.Duration `json:"base"`

	// jitter is a decimal in [0,1], e.g. "0.2".
	// +optional
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$`
	// +kubebuilder:validation:MaxLength=16
	Jitter string `json:"jitter,omitempty"`

	// until ends the fault at this time.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`
}

// APIErrorCode is an HTTP status code the simulated API server can fail a request with.
// +kubebuilder:validation:Enum=429;500;503;504
type APIErrorCode int32

// APIErrorFault fails a share of the requests it matches with an upstream-shaped Status: 429
// TooManyRequests with Retry-After (as API priority and fairness rejects), 500 InternalError,
// 503 ServiceUnavailable, 504 Timeout (as the request timeout filter answers).
type APIErrorFault struct {
	// verbs the rule matches (get, list, watch, create, update, patch, delete, deletecollection);
	// empty or "*" matches every verb.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Enum=get;list;watch;create;update;patch;delete;deletecollection;"*"
	Verbs []string `json:"verbs,omitempty"`

	// resources the rule matches: a resource ("nodes") or resource/subresource ("nodes/status");
	// empty or "*" matches every resource. Requests for non-resource paths (/, /healthz,
	// discovery) are never failed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9.-]+(/[a-z0-9.-]+)?)$`
	Resources []string `json:"resources,omitempty"`

	// code is the HTTP status code of the failure.
	// +required
	Code APIErrorCode `json:"code"`

	// ratio is the share of matching requests that fail, a decimal in [0,1] ("0.1", "1").
	// +required
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$`
	// +kubebuilder:validation:MaxLength=16
	Ratio string `json:"ratio"`

	// until ends the rule at this time.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`
}

// EtcdAlarm is an alarm etcd raises.
// +kubebuilder:validation:Enum=NOSPACE;CORRUPT
type EtcdAlarm string

const (
	// EtcdAlarmNoSpace is etcd's NOSPACE: the backend quota is exhausted, writes are refused.
	EtcdAlarmNoSpace EtcdAlarm = "NOSPACE"
	// EtcdAlarmCorrupt is etcd's CORRUPT: a member's data disagrees with the others'.
	EtcdAlarmCorrupt EtcdAlarm = "CORRUPT"
)

// EtcdSimulation are the faults of the simulated etcd members.
type EtcdSimulation struct {
	// latency is added to every etcd call.
	// +optional
	Latency *LatencyFault `json:"latency,omitempty"`

	// alarm is raised on every member, as etcd lists it (Maintenance Alarm, Status errors).
	// NOSPACE also refuses writes with etcd's "etcdserver: mvcc: database space exceeded", in
	// etcd (Put) and in the API server (create, update, patch answer 500 with it).
	// +optional
	Alarm EtcdAlarm `json:"alarm,omitempty"`

	// alarmUntil ends alarm at this time.
	// +optional
	AlarmUntil *metav1.Time `json:"alarmUntil,omitempty"`

	// leaderless makes the cluster lose its leader: Status reports none, calls that need one
	// fail with "etcdserver: no leader", and so do the API server's writes. Removing it elects a
	// leader with a higher raft term.
	// +optional
	Leaderless bool `json:"leaderless,omitempty"`

	// leaderlessUntil ends leaderless at this time.
	// +optional
	LeaderlessUntil *metav1.Time `json:"leaderlessUntil,omitempty"`
}

// MachineSimulation holds the faults injected into one simulated machine. Set on a
// GoofyMachineTemplate they apply to the machines created from it; a GoofyMachine's own can be
// patched at any time.
type MachineSimulation struct {
	// nodeNotReady makes the machine's Node NotReady, as a kubelet that reports its network not
	// ready. The annotation goofy.infrastructure.cluster.x-k8s.io/node-not-ready is a deprecated
	// alias of it.
	// +optional
	NodeNotReady bool `json:"nodeNotReady,omitempty"`

	// nodeNotReadyUntil ends nodeNotReady at this time.
	// +optional
	NodeNotReadyUntil *metav1.Time `json:"nodeNotReadyUntil,omitempty"`

	// etcdMemberUnhealthy makes the machine's etcd member fail every call addressed to it (Status,
	// the health check's read) and its etcd pod not ready, as kubelet reports a member whose
	// health probe fails (control-plane machines only).
	// +optional
	EtcdMemberUnhealthy bool `json:"etcdMemberUnhealthy,omitempty"`

	// etcdMemberUnhealthyUntil ends etcdMemberUnhealthy at this time.
	// +optional
	EtcdMemberUnhealthyUntil *metav1.Time `json:"etcdMemberUnhealthyUntil,omitempty"`

	// vmFailed makes the VM fail for good: the GoofyMachine reports Ready=False with reason
	// VMFailed (a terminal failure, as CAPI's v1beta2 contract lets an infrastructure machine
	// report one: a documented condition reason), its Node stops posting status (Ready Unknown,
	// as the node lifecycle controller marks an unreachable node) and its etcd member, if any,
	// stops answering.
	// +optional
	VMFailed bool `json:"vmFailed,omitempty"`

	// vmFailedUntil ends vmFailed at this time.
	// +optional
	VMFailedUntil *metav1.Time `json:"vmFailedUntil,omitempty"`
}
