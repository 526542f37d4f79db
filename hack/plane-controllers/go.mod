// The plane's controllers build inside hack/envtest.sh's tools module for k8s.io/kubernetes (which
// has the requirements and replace directives this program needs); this file only keeps the
// directory out of Goofy's own module, so that Goofy never requires k8s.io/kubernetes.
module goofy.local/plane-controllers

go 1.26
