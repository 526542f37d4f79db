package store

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ListOptions selects objects for List, Watch and DeleteCollection.
type ListOptions struct {
	LabelSelector        labels.Selector // nil = everything
	FieldSelector        fields.Selector // nil = everything; unsupported field -> BadRequest
	Limit                int64
	Continue             string
	ResourceVersion      string
	ResourceVersionMatch metav1.ResourceVersionMatch
	// ShareItems (List only): the list's items share their maps and slices with the stored
	// objects instead of being deep copies. For callers that only encode the list, as the API
	// server does; they must neither modify the items nor keep them.
	ShareItems bool
	// SkipSyncWait (List only) answers from memory at once, where a read waits until the
	// changes it would show are on disk. For the simulator's own reads, which act on its own
	// writes (UpdateOptions.SkipSyncWait) and derive them again after a crash; never for a
	// client's.
	SkipSyncWait bool
	// Watch only:
	SendInitialEvents   *bool
	AllowWatchBookmarks bool
	TimeoutSeconds      *int64
}

// CreateOptions tune Create.
type CreateOptions struct {
	DryRun          bool
	FieldManager    string
	FieldValidation string
	// SkipManagedFields: see UpdateOptions.
	SkipManagedFields bool
	// SkipSyncWait: see UpdateOptions.
	SkipSyncWait bool
}

// UpdateOptions tune Update. Subresource "status" updates only the status.
type UpdateOptions struct {
	DryRun          bool
	FieldManager    string
	Subresource     string
	FieldValidation string
	// SkipManagedFields leaves managed-fields tracking out of the write when neither the stored
	// object nor the written one carries managedFields: the object stays as one written before
	// server-side apply existed (no entry for this write), which saves computing the field set.
	// An object that already has managedFields (e.g. from a write over HTTP) is tracked as
	// usual, so appliers keep their ownership and conflicts. The first server-side apply on an
	// untracked object attributes its existing fields to "before-first-apply", as upstream does.
	SkipManagedFields bool
	// SkipSyncWait answers once the write is queued to disk, in order with every other write,
	// instead of once it is synced. For the simulator's own writes (Nodes, static pods, kubeadm
	// objects), which it derives again after a crash; never for a client's.
	SkipSyncWait bool
	// ValidateObject, when set, judges the prepared object (defaulted, validated, with its
	// managed fields) as the last step of preparing the write, as kube-apiserver's RBAC storage
	// judges inside GuaranteedUpdate: the write commits only if the stored object is still the
	// one it was prepared from, and one prepared again because the object changed meanwhile is
	// judged again, so the object stored is always the one judged. Dry runs are judged too.
	ValidateObject ValidateObjectFunc
}

// PatchOptions tune Patch. Force only applies to server-side apply.
type PatchOptions struct {
	DryRun          bool
	FieldManager    string
	Force           bool
	Subresource     string
	FieldValidation string
	// SkipManagedFields: see UpdateOptions. Server-side apply ignores it: it always tracks.
	SkipManagedFields bool
	// SkipSyncWait: see UpdateOptions.
	SkipSyncWait bool
	// ValidateObject: see UpdateOptions (old is nil when server-side apply creates the object).
	ValidateObject ValidateObjectFunc
}

// ValidateObjectFunc judges the object a write is about to store, obj, against the stored one it
// replaces, old (nil for a create). Both are in the stored form (for a view, the stored
// resource's) and must not be changed. An error aborts the write and is returned as it is. It
// runs without the cluster lock held, so it may read the cluster.
type ValidateObjectFunc func(obj, old client.Object) error

// DeleteOptions tune Delete and DeleteCollection.
type DeleteOptions struct {
	DryRun             bool
	Preconditions      *metav1.Preconditions
	GracePeriodSeconds *int64
	PropagationPolicy  *metav1.DeletionPropagation
	// SkipSyncWait: see UpdateOptions.
	SkipSyncWait bool
}
