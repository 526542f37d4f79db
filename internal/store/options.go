package store

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// ListOptions selects objects for List, Watch and DeleteCollection.
type ListOptions struct {
	LabelSelector        labels.Selector // nil = everything
	FieldSelector        fields.Selector // nil = everything; unsupported field -> BadRequest
	Limit                int64
	Continue             string
	ResourceVersion      string
	ResourceVersionMatch metav1.ResourceVersionMatch
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
}

// UpdateOptions tune Update. Subresource "status" updates only the status.
type UpdateOptions struct {
	DryRun          bool
	FieldManager    string
	Subresource     string
	FieldValidation string
}

// PatchOptions tune Patch. Force only applies to server-side apply.
type PatchOptions struct {
	DryRun          bool
	FieldManager    string
	Force           bool
	Subresource     string
	FieldValidation string
}

// DeleteOptions tune Delete and DeleteCollection.
type DeleteOptions struct {
	DryRun             bool
	Preconditions      *metav1.Preconditions
	GracePeriodSeconds *int64
	PropagationPolicy  *metav1.DeletionPropagation
}
