package store

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// DefaultStorageQuota bounds what one workload cluster may store when ClusterOptions leaves it
// 0: far above what kubeadm, CAPI and typical add-ons write (a few MiB even with large CRDs),
// and small enough that one runaway client cannot fill the process that serves every cluster.
// etcd's own default quota is 2 GiB for a whole real cluster.
const DefaultStorageQuota = 64 << 20

// errQuotaExceeded is what kube-apiserver answers when etcd's space quota is exhausted: etcd's
// error passed through unconverted, a 500 with an empty reason.
func errQuotaExceeded() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusInternalServerError,
		Message: "etcdserver: mvcc: database space exceeded",
	}}
}

// admitLocked refuses a write once the cluster's objects (their storage.SizeOf) take up its quota, as etcd raises its
// NOSPACE alarm: until deletes bring it under the quota again, only writes that do not grow an
// object pass (unlike etcd, which then also needs a defragmentation and a disarm: removing a
// finalizer still works here). Callers hold c.mu.
func (c *Cluster) admitLocked(next, cur client.Object) error {
	if c.quota <= 0 || c.objs.Bytes() < c.quota {
		return nil
	}
	if cur != nil && storage.SizeOf(next) <= storage.SizeOf(cur) {
		return nil
	}
	return errQuotaExceeded()
}

// StoredBytes is the size of the cluster's objects (their protobuf encoding).
func (c *Cluster) StoredBytes() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.objs.Bytes()
}
