package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DumpLogs writes the last n lines of every log file to w, for failure reports.
func DumpLogs(w io.Writer, files map[string]string, n int) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "----- last %d lines of %s (%s)\n", n, name, files[name])
		for _, l := range tail(files[name], n) {
			fmt.Fprintln(w, l)
		}
	}
}

func tail(file string, n int) []string {
	f, err := os.Open(file)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines
}

// dumpKinds are the kinds DumpObjects writes, CAPI's and Goofy's.
var dumpKinds = []schema.GroupVersionKind{
	{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"},
	{Group: "controlplane.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmControlPlane"},
	{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"},
	{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineSet"},
	{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Machine"},
	{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineHealthCheck"},
	{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachinePool"},
	{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfig"},
	{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "GoofyCluster"},
	{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "GoofyMachine"},
	{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "GoofyMachinePool"},
}

// DumpObjects writes every CAPI and Goofy object of a namespace as YAML into <OutputDir>/objects-<ns>.yaml
// and returns the file's path.
func (p *Plane) DumpObjects(ctx context.Context, namespace string) (string, error) {
	path := fmt.Sprintf("%s/objects-%s.yaml", p.opts.OutputDir, namespace)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, gvk := range dumpKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := p.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
			fmt.Fprintf(f, "# listing %s: %v\n", gvk.Kind, err)
			continue
		}
		for _, item := range list.Items {
			item.SetManagedFields(nil)
			data, err := yaml.Marshal(item.Object)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(f, "---\n%s", data)
		}
	}
	return path, nil
}
