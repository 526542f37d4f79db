// Package simulate runs the components that make a simulated workload cluster alive: the parts of
// kube-controller-manager, kube-scheduler and the kubelets a client would notice missing. One file
// per component, as kube-controller-manager lays them out.
//
// Each component is a controller in kube-controller-manager's shape: it follows the kinds it
// watches through the store's informer (store.Cluster.Inform, for in-process and HTTP writes
// alike), keeps keys in its queue, and reconciles a key by reading the cluster's shared cache and
// writing through the store's client, as any client would. Nothing here holds the store's lock or
// reads its internals. Work runs on a goroutine per busy cluster, bounded process-wide; a
// Running pod is an object and at most a timer, never a goroutine. A restart is "load the
// store, start the components": the informer hands them every object again and they re-arm
// what was pending (pods that were Running stay Running).
package simulate
