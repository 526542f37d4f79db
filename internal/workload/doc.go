// Package workload builds the objects a kubeadm-provisioned cluster holds in its own API server:
// Nodes, the control-plane static pods, kubeadm's kube-system ConfigMaps, CoreDNS, kube-proxy and the
// RBAC bindings KCP reads, so that CAPI, KCP and users see a simulated cluster as a kubeadm cluster.
package workload
