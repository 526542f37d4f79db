package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// TestSecretCache: the cache holds only Secrets of CAPI clusters, and of those only the cluster
// and etcd CAs keep their data; managed fields are dropped from all.
func TestSecretCache(t *testing.T) {
	c := SecretCache()
	if !c.Label.Matches(labels.Set{clusterv1.ClusterNameLabel: "c1"}) || c.Label.Matches(labels.Set{"other": "x"}) {
		t.Fatalf("selector %q must select exactly the Secrets with the cluster-name label", c.Label)
	}
	secretOf := func(name string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kcp"}}},
			Data: map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("y")},
		}
	}
	for name, keep := range map[string]bool{
		"c1-ca": true, "c1-etcd": true,
		"c1-sa": false, "c1-proxy": false, "c1-kubeconfig": false, "c1-md-0-abcde": false, "c2-ca": false,
	} {
		out, err := c.Transform(secretOf(name))
		if err != nil {
			t.Fatal(err)
		}
		s := out.(*corev1.Secret)
		if (len(s.Data) > 0) != keep {
			t.Errorf("%s: data kept = %v, want %v", name, len(s.Data) > 0, keep)
		}
		if s.ManagedFields != nil {
			t.Errorf("%s: managed fields kept", name)
		}
	}
}
