package v1alpha1

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/randfill"
)

// fullyPopulated returns one object of every kind with every field set, so round trips cover them all.
func fullyPopulated() []runtime.Object {
	cond := metav1.Condition{Type: ReadyCondition, Status: metav1.ConditionTrue, Reason: ReadyReason, LastTransitionTime: metav1.Now().Rfc3339Copy()}
	clusterSpec := GoofyClusterSpec{
		ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 20000},
		Backend: GoofyClusterBackend{Azure: &AzureClusterBackend{
			SubscriptionID: "00000000-0000-0000-0000-000000000001", ResourceGroup: "rg", ClusterUID: "uid",
			Cloud: &AzureCloud{Name: AzureCustomCloud, ResourceManagerEndpoint: "https://arm.local", ResourceManagerAudience: "https://arm.local", ActiveDirectoryAuthorityHost: "https://login.local"},
		}},
		FailureDomains: []GoofyFailureDomain{{Name: "fd1", ControlPlane: ptr.To(true), Attributes: map[string]string{"zone": "1"}}},
	}
	machineSpec := GoofyMachineSpec{
		ProviderID: "goofy://ns/c/m",
		Backend: GoofyMachineBackend{InMemory: &InMemoryMachineBackend{
			VM:        PhaseSpec{Provisioning: ProvisioningSpec{StartupDuration: metav1.Duration{Duration: 3e9}, StartupJitter: "0.2"}},
			Node:      PhaseSpec{Provisioning: ProvisioningSpec{StartupDuration: metav1.Duration{Duration: 2e9}}},
			APIServer: PhaseSpec{Provisioning: ProvisioningSpec{StartupJitter: "1"}},
			Etcd:      PhaseSpec{Provisioning: ProvisioningSpec{StartupDuration: metav1.Duration{Duration: 1e9}}},
		}},
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("1")},
	}
	poolSpec := GoofyMachinePoolSpec{
		ProviderID:     "goofy://ns/c/machinepools/p",
		ProviderIDList: []string{"goofy://ns/c/p-a", "goofy://ns/c/p-b"},
		Template: GoofyMachinePoolInstanceTemplate{
			ObjectMeta: clusterv1.ObjectMeta{Annotations: map[string]string{"k": "v"}},
			Spec: GoofyMachinePoolInstanceSpec{
				Capacity: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Gi")},
				InMemory: machineSpec.Backend.InMemory,
			},
		},
		DeletePolicy: DeletePolicyNewest,
	}
	return []runtime.Object{
		&GoofyCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Labels: map[string]string{"a": "b"}},
			Spec:       clusterSpec,
			Status: GoofyClusterStatus{
				Initialization:       GoofyClusterInitializationStatus{Provisioned: ptr.To(true)},
				FailureDomains:       []clusterv1.FailureDomain{{Name: "fd1", ControlPlane: ptr.To(true)}},
				LoadBalancerEndpoint: &clusterv1.APIEndpoint{Host: "10.0.0.4", Port: 6443},
				Conditions:           []metav1.Condition{cond},
			},
		},
		&GoofyMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"},
			Spec:       machineSpec,
			Status: GoofyMachineStatus{
				Initialization: GoofyMachineInitializationStatus{Provisioned: ptr.To(false)},
				Addresses:      []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.1"}},
				FailureDomain:  "fd1",
				Conditions:     []metav1.Condition{cond},
			},
		},
		&GoofyMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"},
			Spec:       GoofyMachineTemplateSpec{Template: GoofyMachineTemplateResource{ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"x": "y"}}, Spec: machineSpec}},
			Status: GoofyMachineTemplateStatus{
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				NodeInfo: NodeInfo{Architecture: ArchitectureArm64, OperatingSystem: "linux"},
			},
		},
		&GoofyClusterTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "ct", Namespace: "ns"},
			Spec:       GoofyClusterTemplateSpec{Template: GoofyClusterTemplateResource{ObjectMeta: clusterv1.ObjectMeta{Annotations: map[string]string{"k": "v"}}, Spec: clusterSpec}},
		},
		&GoofyMachinePool{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec:       poolSpec,
			Status: GoofyMachinePoolStatus{
				Initialization:            GoofyMachinePoolInitializationStatus{Provisioned: ptr.To(true)},
				Replicas:                  ptr.To[int32](2),
				ReadyReplicas:             ptr.To[int32](1),
				InfrastructureMachineKind: "GoofyMachine",
				Conditions:                []metav1.Condition{cond},
			},
		},
		&GoofyMachinePoolTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "pt", Namespace: "ns"},
			Spec:       GoofyMachinePoolTemplateSpec{Template: GoofyMachinePoolTemplateResource{ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"x": "y"}}, Spec: poolSpec}},
		},
		&GoofyMachinePoolList{Items: []GoofyMachinePool{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}},
		&GoofyMachinePoolTemplateList{Items: []GoofyMachinePoolTemplate{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}},
		&GoofyClusterList{Items: []GoofyCluster{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}},
		&GoofyMachineList{Items: []GoofyMachine{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}},
		&GoofyMachineTemplateList{Items: []GoofyMachineTemplate{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}},
		&GoofyClusterTemplateList{Items: []GoofyClusterTemplate{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}},
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for _, obj := range fullyPopulated() {
		t.Run(typeName(obj), func(t *testing.T) {
			g := NewWithT(t)
			data, err := json.Marshal(obj)
			g.Expect(err).NotTo(HaveOccurred())
			back := obj.DeepCopyObject()
			zero(back)
			g.Expect(json.Unmarshal(data, back)).To(Succeed())
			g.Expect(equality.Semantic.DeepEqual(obj, back)).To(BeTrue(), "JSON round trip changed %s:\n%s", typeName(obj), data)
		})
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	g := NewWithT(t)
	for i := 0; i < 20; i++ {
		for _, proto := range fullyPopulated() {
			obj := proto.DeepCopyObject()
			randfill.NewWithSeed(int64(i)).NilChance(0.2).Fill(obj)
			cp := obj.DeepCopyObject()
			g.Expect(equality.Semantic.DeepEqual(obj, cp)).To(BeTrue())
			// Mutating the copy through JSON must not touch the original.
			before, _ := json.Marshal(obj)
			mutate(cp)
			after, _ := json.Marshal(obj)
			g.Expect(string(after)).To(Equal(string(before)), "deepcopy of %s shares memory", typeName(obj))
		}
	}
}

func TestSchemeRegistersAllKinds(t *testing.T) {
	g := NewWithT(t)
	s := runtime.NewScheme()
	g.Expect(AddToScheme(s)).To(Succeed())
	for _, kind := range []string{"GoofyCluster", "GoofyClusterList", "GoofyMachine", "GoofyMachineList", "GoofyMachineTemplate", "GoofyMachineTemplateList", "GoofyClusterTemplate", "GoofyClusterTemplateList",
		"GoofyMachinePool", "GoofyMachinePoolList", "GoofyMachinePoolTemplate", "GoofyMachinePoolTemplateList"} {
		g.Expect(s.Recognizes(GroupVersion.WithKind(kind))).To(BeTrue(), kind)
	}
}

func typeName(obj runtime.Object) string {
	t := obj.GetObjectKind().GroupVersionKind().Kind
	if t == "" {
		return fmtType(obj)
	}
	return t
}

func fmtType(obj runtime.Object) string {
	switch obj.(type) {
	case *GoofyCluster:
		return "GoofyCluster"
	case *GoofyMachine:
		return "GoofyMachine"
	case *GoofyMachineTemplate:
		return "GoofyMachineTemplate"
	case *GoofyClusterTemplate:
		return "GoofyClusterTemplate"
	case *GoofyMachinePool:
		return "GoofyMachinePool"
	case *GoofyMachinePoolTemplate:
		return "GoofyMachinePoolTemplate"
	default:
		return "List"
	}
}

// zero resets obj to its zero value in place.
func zero(obj runtime.Object) {
	switch o := obj.(type) {
	case *GoofyCluster:
		*o = GoofyCluster{}
	case *GoofyMachine:
		*o = GoofyMachine{}
	case *GoofyMachineTemplate:
		*o = GoofyMachineTemplate{}
	case *GoofyClusterTemplate:
		*o = GoofyClusterTemplate{}
	case *GoofyClusterList:
		*o = GoofyClusterList{}
	case *GoofyMachineList:
		*o = GoofyMachineList{}
	case *GoofyMachineTemplateList:
		*o = GoofyMachineTemplateList{}
	case *GoofyClusterTemplateList:
		*o = GoofyClusterTemplateList{}
	case *GoofyMachinePool:
		*o = GoofyMachinePool{}
	case *GoofyMachinePoolTemplate:
		*o = GoofyMachinePoolTemplate{}
	case *GoofyMachinePoolList:
		*o = GoofyMachinePoolList{}
	case *GoofyMachinePoolTemplateList:
		*o = GoofyMachinePoolTemplateList{}
	}
}

// mutate changes nested, pointer-held fields of obj.
func mutate(obj runtime.Object) {
	switch o := obj.(type) {
	case *GoofyCluster:
		for i := range o.Spec.FailureDomains {
			o.Spec.FailureDomains[i].Name += "x"
			for k := range o.Spec.FailureDomains[i].Attributes {
				o.Spec.FailureDomains[i].Attributes[k] = "changed"
			}
			if o.Spec.FailureDomains[i].ControlPlane != nil {
				*o.Spec.FailureDomains[i].ControlPlane = !*o.Spec.FailureDomains[i].ControlPlane
			}
		}
		if o.Spec.Backend.Azure != nil {
			o.Spec.Backend.Azure.ClusterUID += "x"
			if o.Spec.Backend.Azure.Cloud != nil {
				o.Spec.Backend.Azure.Cloud.Name += "x"
			}
		}
		if o.Status.Initialization.Provisioned != nil {
			*o.Status.Initialization.Provisioned = !*o.Status.Initialization.Provisioned
		}
		for i := range o.Status.Conditions {
			o.Status.Conditions[i].Reason += "x"
		}
	case *GoofyMachine:
		if o.Spec.Backend.InMemory != nil {
			o.Spec.Backend.InMemory.VM.Provisioning.StartupJitter += "9"
		}
		for i := range o.Status.Addresses {
			o.Status.Addresses[i].Address += "9"
		}
		for k := range o.Spec.Capacity {
			o.Spec.Capacity[k] = resource.MustParse("99")
		}
	case *GoofyMachineTemplate:
		for k := range o.Spec.Template.ObjectMeta.Labels {
			o.Spec.Template.ObjectMeta.Labels[k] = "changed"
		}
		for k := range o.Status.Capacity {
			o.Status.Capacity[k] = resource.MustParse("99")
		}
	case *GoofyClusterTemplate:
		for k := range o.Spec.Template.ObjectMeta.Annotations {
			o.Spec.Template.ObjectMeta.Annotations[k] = "changed"
		}
	case *GoofyClusterList:
		for i := range o.Items {
			o.Items[i].Name += "x"
		}
	case *GoofyMachinePool:
		for i := range o.Spec.ProviderIDList {
			o.Spec.ProviderIDList[i] += "x"
		}
		for k := range o.Spec.Template.Spec.Capacity {
			o.Spec.Template.Spec.Capacity[k] = resource.MustParse("99")
		}
		if o.Spec.Template.Spec.InMemory != nil {
			o.Spec.Template.Spec.InMemory.Node.Provisioning.StartupJitter += "9"
		}
		if o.Status.Replicas != nil {
			*o.Status.Replicas++
		}
	case *GoofyMachinePoolTemplate:
		for k := range o.Spec.Template.ObjectMeta.Labels {
			o.Spec.Template.ObjectMeta.Labels[k] = "changed"
		}
		for i := range o.Spec.Template.Spec.ProviderIDList {
			o.Spec.Template.Spec.ProviderIDList[i] += "x"
		}
	}
}
