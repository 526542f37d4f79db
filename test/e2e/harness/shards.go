package harness

import (
	"bytes"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"
)

// WithWatchFilter labels every object of rendered cluster manifests with CAPI's watch-filter
// label, value, and the metadata of the machine templates too (what CAPI creates from them carries
// their labels), as a user of sharded managers does (docs/scaling.md).
func WithWatchFilter(manifests []byte, value string) ([]byte, error) {
	var out [][]byte
	for _, doc := range strings.Split(string(manifests), "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, fmt.Errorf("labelling for shard %s: %w", value, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[clusterv1.WatchLabel] = value
		u.SetLabels(labels)
		switch u.GetKind() {
		case "GoofyMachineTemplate", "MachineDeployment", "KubeadmConfigTemplate":
			_ = unstructured.SetNestedField(u.Object, value, "spec", "template", "metadata", "labels", clusterv1.WatchLabel)
		case "KubeadmControlPlane":
			_ = unstructured.SetNestedField(u.Object, value, "spec", "machineTemplate", "metadata", "labels", clusterv1.WatchLabel)
		}
		data, err := yaml.Marshal(u.Object)
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	return bytes.Join(out, []byte("\n---\n")), nil
}
