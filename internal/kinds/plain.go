package kinds

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// plainStrategy is a kind with nothing of its own beyond its resource entry and a few flags.
type plainStrategy struct{ base }

func init() {
	core, apps, rbac, storage := corev1.SchemeGroupVersion, appsv1.SchemeGroupVersion, rbacv1.SchemeGroupVersion, storagev1.SchemeGroupVersion
	rbacNames := withNames(validatePathSegmentName)
	for _, k := range []struct {
		r    resource
		opts []func(*base)
	}{
		{resource{core, "endpoints", "Endpoints", true, []string{"ep"}, nil, nil}, []func(*base){withCreateOnUpdate}},
		{resource{core, "limitranges", "LimitRange", true, []string{"limits"}, nil, nil}, []func(*base){withCreateOnUpdate}},
		{resource{core, "resourcequotas", "ResourceQuota", true, []string{"quota"}, nil, []string{"status"}}, nil},
		{resource{core, "serviceaccounts", "ServiceAccount", true, []string{"sa"}, nil, nil}, nil},
		{resource{apps, "controllerrevisions", "ControllerRevision", true, nil, nil, nil}, nil},
		{resource{batchv1.SchemeGroupVersion, "cronjobs", "CronJob", true, []string{"cj"}, []string{"all"}, []string{"status"}}, []func(*base){withGeneration}},
		{resource{rbac, "clusterrolebindings", "ClusterRoleBinding", false, nil, nil, nil}, []func(*base){withCreateOnUpdate, rbacNames}},
		{resource{rbac, "clusterroles", "ClusterRole", false, nil, nil, nil}, []func(*base){withCreateOnUpdate, rbacNames}},
		{resource{rbac, "rolebindings", "RoleBinding", true, nil, nil, nil}, []func(*base){withCreateOnUpdate, rbacNames}},
		{resource{rbac, "roles", "Role", true, nil, nil, nil}, []func(*base){withCreateOnUpdate, rbacNames}},
		{resource{storage, "csidrivers", "CSIDriver", false, nil, nil, nil}, nil},
		{resource{storage, "csinodes", "CSINode", false, nil, nil, nil}, nil},
		{resource{storage, "csistoragecapacities", "CSIStorageCapacity", true, nil, nil, nil}, nil},
		{resource{storage, "storageclasses", "StorageClass", false, []string{"sc"}, nil, nil}, nil},
		{resource{storage, "volumeattributesclasses", "VolumeAttributesClass", false, []string{"vac"}, nil, nil}, nil},
		{resource{policyv1.SchemeGroupVersion, "poddisruptionbudgets", "PodDisruptionBudget", true, []string{"pdb"}, nil, []string{"status"}}, []func(*base){withGeneration}},
		{resource{coordinationv1.SchemeGroupVersion, "leases", "Lease", true, nil, nil, nil}, []func(*base){withCreateOnUpdate}},
		{resource{discoveryv1.SchemeGroupVersion, "endpointslices", "EndpointSlice", true, nil, nil, nil}, []func(*base){withGeneration}},
	} {
		register(plainStrategy{newBase(k.r, k.opts...)})
	}
}

// validatePathSegmentName is RBAC's name rule upstream: any name usable as one URL path segment.
func validatePathSegmentName(name string, prefix bool) []string {
	if prefix {
		return content.IsPathSegmentPrefix(name)
	}
	return content.IsPathSegmentName(name)
}
