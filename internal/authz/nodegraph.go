package authz

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The part of upstream's Node authorizer graph Goofy keeps: a node may read a secret, configmap or
// persistentvolumeclaim that a pod bound to it references, the persistentvolume of such a claim,
// and get (or create a token for) the service account such a pod runs as. Instead of a graph kept
// up to date, each such request lists the node's pods in the object's namespace (persistent
// volumes: in every namespace): node requests are rare in a simulated cluster, whose kubelets run
// in process.

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// graphAllows decides a node's request for one of the graph's kinds. It returns false and
// upstream's reason when no pod bound to the node leads to the object.
func graphAllows(c *store.Cluster, node string, attrs authorizer.Attributes) (bool, string) {
	resource, sub, verb, name := attrs.GetResource(), attrs.GetSubresource(), attrs.GetVerb(), attrs.GetName()
	switch {
	case attrs.GetAPIGroup() != "":
		// resourceclaims and volumeattachments: not followed.
	case resource == "secrets" || resource == "configmaps":
		// A kubelet reads them one at a time: get, or list and watch with a metadata.name field
		// selector (which RequestInfo turns into the name).
		switch {
		case verb != "get" && verb != "list" && verb != "watch":
			return false, "can only read resources of this type"
		case sub != "":
			return false, "cannot read subresource"
		case name == "":
			return false, "No Object name found"
		}
	case resource == "persistentvolumeclaims" || resource == "persistentvolumes":
		if verb != "get" || sub != "" {
			return false, fmt.Sprintf("can only get individual %s", resource)
		}
	case resource == "serviceaccounts":
		if !(verb == "get" && sub == "") && !(verb == "create" && sub == "token") {
			return false, "can only get a service account or create its token"
		}
	}
	if name != "" && attrs.GetAPIGroup() == "" && referenced(c, node, attrs.GetNamespace(), resource, name) {
		return true, ""
	}
	return false, fmt.Sprintf("no relationship found between node '%s' and this object", node)
}

// referenced reports whether a pod bound to node refers to the named object.
func referenced(c *store.Cluster, node, namespace, resource, name string) bool {
	if resource == "persistentvolumes" {
		namespace = "" // through claims in any namespace
	}
	obj, err := c.List(podsGVR, namespace, store.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node), ShareItems: true})
	if err != nil {
		return false
	}
	pods, _ := obj.(*corev1.PodList)
	if pods == nil {
		return false
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		switch resource {
		case "serviceaccounts":
			if pod.Spec.ServiceAccountName == name {
				return true
			}
		case "persistentvolumes":
			for _, claim := range claimsOf(pod) {
				if pvc, err := c.Get(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), pod.Namespace, claim); err == nil &&
					pvc.(*corev1.PersistentVolumeClaim).Spec.VolumeName == name {
					return true
				}
			}
		case "persistentvolumeclaims":
			for _, claim := range claimsOf(pod) {
				if claim == name {
					return true
				}
			}
		default:
			if podRefers(pod, resource, name) {
				return true
			}
		}
	}
	return false
}

// claimsOf lists the claims a pod's volumes use, generic ephemeral volumes' included.
func claimsOf(pod *corev1.Pod) []string {
	var claims []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			claims = append(claims, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			claims = append(claims, pod.Name+"-"+v.Name)
		}
	}
	return claims
}

// podRefers reports whether a pod refers to the named secret or configmap: volumes (projected
// ones included), environment, image pull secrets.
func podRefers(pod *corev1.Pod, resource, name string) bool {
	secret := resource == "secrets"
	if secret {
		for _, s := range pod.Spec.ImagePullSecrets {
			if s.Name == name {
				return true
			}
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case secret && v.Secret != nil && v.Secret.SecretName == name,
			!secret && v.ConfigMap != nil && v.ConfigMap.Name == name:
			return true
		case v.Projected != nil:
			for _, p := range v.Projected.Sources {
				if (secret && p.Secret != nil && p.Secret.Name == name) || (!secret && p.ConfigMap != nil && p.ConfigMap.Name == name) {
					return true
				}
			}
		}
	}
	containers := append(append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...), ephemeralContainers(pod)...)
	for _, ctr := range containers {
		for _, e := range ctr.EnvFrom {
			if (secret && e.SecretRef != nil && e.SecretRef.Name == name) || (!secret && e.ConfigMapRef != nil && e.ConfigMapRef.Name == name) {
				return true
			}
		}
		for _, e := range ctr.Env {
			if e.ValueFrom == nil {
				continue
			}
			if (secret && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == name) ||
				(!secret && e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Name == name) {
				return true
			}
		}
	}
	return false
}

func ephemeralContainers(pod *corev1.Pod) []corev1.Container {
	out := make([]corev1.Container, 0, len(pod.Spec.EphemeralContainers))
	for _, e := range pod.Spec.EphemeralContainers {
		out = append(out, corev1.Container(e.EphemeralContainerCommon))
	}
	return out
}
