package controllers

import (
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// poolInstanceMachine is the Machine a pool instance's GoofyMachine is provisioned for. CAPI's
// MachinePool controller creates the Machine of an instance with an empty bootstrap data secret
// name and no version (it copies the version from the Node once there is one): an instance joins
// with its MachinePool's bootstrap data and Kubernetes version, which the pool recorded on the
// instance when it created it (InstanceBootstrapDataAnnotation, InstanceKubernetesVersionAnnotation).
// Any other machine's Machine is returned as it is.
func poolInstanceMachine(machine *clusterv1.Machine, gm *infrav1.GoofyMachine) *clusterv1.Machine {
	if poolOwnerRef(gm) == nil {
		return machine
	}
	m := machine.DeepCopy()
	if secret := m.Spec.Bootstrap.DataSecretName; secret == nil || *secret == "" {
		m.Spec.Bootstrap.DataSecretName = nil // waits (WaitingForBootstrapData) without the pool's
		if name := gm.Annotations[infrav1.InstanceBootstrapDataAnnotation]; name != "" {
			m.Spec.Bootstrap.DataSecretName = &name
		}
	}
	if m.Spec.Version == "" {
		m.Spec.Version = gm.Annotations[infrav1.InstanceKubernetesVersionAnnotation]
	}
	return m
}
