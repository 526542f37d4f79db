// Package helm installs, upgrades and uninstalls a chart into a Goofy workload cluster with
// Helm's own Go SDK. It is a module of its own so the manager's module does not depend on Helm.
package helm
