package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// TestCachedClustersKeepTheirGates: a cached Cluster keeps metadata, spec and what the GoofyMachine
// reconciler waits on (clusterGatesOf, through the condition or the initialization flag, with the
// other conditions around it), and drops the rest of its status and its managed fields.
func TestCachedClustersKeepTheirGates(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: "R", Message: "a message CAPI writes"}
	}
	for _, tc := range []struct {
		name   string
		status clusterv1.ClusterStatus
	}{
		{"nothing yet", clusterv1.ClusterStatus{Phase: "Provisioning"}},
		{"infrastructure provisioned", clusterv1.ClusterStatus{
			Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true)},
			Conditions: []metav1.Condition{cond(clusterv1.ClusterInfrastructureReadyCondition, metav1.ConditionTrue),
				cond(clusterv1.ClusterControlPlaneInitializedCondition, metav1.ConditionFalse)},
		}},
		{"control plane initialized (condition)", clusterv1.ClusterStatus{
			Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true)},
			Conditions: []metav1.Condition{cond(clusterv1.AvailableCondition, metav1.ConditionFalse),
				cond(clusterv1.ClusterControlPlaneInitializedCondition, metav1.ConditionTrue), cond(clusterv1.PausedCondition, metav1.ConditionFalse)},
			Phase: "Provisioned",
		}},
		{"control plane initialized (flag)", clusterv1.ClusterStatus{
			Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true), ControlPlaneInitialized: ptr.To(true)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clusterv1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ns", Labels: map[string]string{"l": "v"},
					ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "capi"}}},
				Spec:   clusterv1.ClusterSpec{Paused: ptr.To(true), ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 20000}},
				Status: tc.status,
			}
			want := c.DeepCopy()
			out, err := ClusterCache().Transform(c)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*clusterv1.Cluster)
			if clusterGatesOf(got) != clusterGatesOf(want) {
				t.Errorf("gates %+v, want %+v", clusterGatesOf(got), clusterGatesOf(want))
			}
			NewWithT(t).Expect(got.Spec).To(Equal(want.Spec))
			if got.ManagedFields != nil || got.Status.Phase != "" || len(got.Status.Conditions) > 1 {
				t.Errorf("kept %v managed fields, phase %q, conditions %v", got.ManagedFields, got.Status.Phase, got.Status.Conditions)
			}
		})
	}
}

// TestCachedMachinesKeepTheirSpec: a cached Machine keeps metadata and spec, and drops its status
// and managed fields.
func TestCachedMachinesKeepTheirSpec(t *testing.T) {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: "ns", Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "capi"}}},
		Spec: clusterv1.MachineSpec{ClusterName: "c1", Version: "v1.36.3", FailureDomain: "fd1",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("m1-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "GoofyMachine", Name: "m1"}},
		Status: clusterv1.MachineStatus{Phase: "Running", NodeRef: clusterv1.MachineNodeReference{Name: "n1"},
			Addresses: clusterv1.MachineAddresses{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.1"}}},
	}
	want := m.DeepCopy()
	out, err := MachineCache().Transform(m)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*clusterv1.Machine)
	want.ManagedFields, want.Status = nil, clusterv1.MachineStatus{}
	NewWithT(t).Expect(got).To(Equal(want))
}
