package controllers

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// bootstrapPolicyLabel marks the objects of kube-apiserver's default RBAC policy; kubeadm's
// roles and bindings do not carry it.
const bootstrapPolicyLabel = "kubernetes.io/bootstrapping"

// isBootstrapPolicy reports whether obj is one of kube-apiserver's default RBAC objects.
func isBootstrapPolicy(obj client.Object) bool {
	return obj.GetLabels()[bootstrapPolicyLabel] == "rbac-defaults"
}

// reconcileBootstrapPolicy brings one object of kube-apiserver's default RBAC policy up to date in
// a workload cluster whose API server starts, as kube-apiserver's rbac/bootstrap-roles post-start
// hook does on every start: it creates the object if it is missing and adds the rules,
// aggregation selectors, subjects, labels and annotations the stored one lacks (a cluster whose
// state was written by an older Goofy, a rule a user deleted). It removes nothing, and leaves an
// object annotated rbac.authorization.kubernetes.io/autoupdate=false as it is. The comparison is
// upstream's (k8s.io/component-helpers/auth/rbac/reconciliation).
func reconcileBootstrapPolicy(ctx context.Context, c client.Client, obj client.Object) error {
	// Upstream's comparison breaks every rule down to single verbs and resources (13 ms for the
	// whole policy): an object stored as the policy has it, the common case, skips it.
	if same, err := storedAsIs(ctx, c, obj); err != nil || same {
		return err
	}
	var (
		op        reconciliation.ReconcileOperation
		protected bool
		err       error
	)
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		// An aggregated role comes with the rules the aggregation controller fills in
		// (workload.DefaultRBAC), so one created here is complete at once.
		op, protected, err = reconcileRules(reconciliation.ClusterRoleRuleOwner{ClusterRole: o}, ruleOwners{ctx: ctx, c: c, cluster: true})
	case *rbacv1.Role:
		op, protected, err = reconcileRules(reconciliation.RoleRuleOwner{Role: o}, ruleOwners{ctx: ctx, c: c})
	case *rbacv1.ClusterRoleBinding:
		op, protected, err = reconcileSubjects(reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: o}, bindings{ctx: ctx, c: c, cluster: true})
	case *rbacv1.RoleBinding:
		op, protected, err = reconcileSubjects(reconciliation.RoleBindingAdapter{RoleBinding: o}, bindings{ctx: ctx, c: c})
	default:
		return createIfAbsent(ctx, c, obj)
	}
	if err != nil {
		return fmt.Errorf("reconciling the default RBAC policy's %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	if op != reconciliation.ReconcileNone && op != reconciliation.ReconcileCreate && !protected {
		ctrl.LoggerFrom(ctx).V(2).Info("Reconciled an object of the default RBAC policy", "kind", fmt.Sprintf("%T", obj),
			"object", client.ObjectKeyFromObject(obj), "operation", op)
	}
	return nil
}

// reconcileRules runs upstream's reconciliation of a (Cluster)Role, writing what it finds.
func reconcileRules(expected reconciliation.RuleOwner, stored reconciliation.RuleOwnerModifier) (reconciliation.ReconcileOperation, bool, error) {
	res, err := (&reconciliation.ReconcileRoleOptions{Role: expected, Client: stored, Confirm: true}).Run()
	if err != nil {
		return "", false, err
	}
	return res.Operation, res.Protected, nil
}

// reconcileSubjects runs upstream's reconciliation of a (Cluster)RoleBinding, writing what it finds.
func reconcileSubjects(expected reconciliation.RoleBinding, stored reconciliation.RoleBindingModifier) (reconciliation.ReconcileOperation, bool, error) {
	res, err := (&reconciliation.ReconcileRoleBindingOptions{RoleBinding: expected, Client: stored, Confirm: true}).Run()
	if err != nil {
		return "", false, err
	}
	return res.Operation, res.Protected, nil
}

// storedAsIs reports whether the stored object has obj's rules (or roleRef and subjects),
// aggregation rule, labels and annotations, so that reconciling it would change nothing.
func storedAsIs(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
	stored := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !hasAll(stored.GetLabels(), obj.GetLabels()) || !hasAll(stored.GetAnnotations(), obj.GetAnnotations()) {
		return false, nil
	}
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		s := stored.(*rbacv1.ClusterRole)
		return equality.Semantic.DeepEqual(s.Rules, o.Rules) && equality.Semantic.DeepEqual(s.AggregationRule, o.AggregationRule), nil
	case *rbacv1.Role:
		return equality.Semantic.DeepEqual(stored.(*rbacv1.Role).Rules, o.Rules), nil
	case *rbacv1.ClusterRoleBinding:
		s := stored.(*rbacv1.ClusterRoleBinding)
		return s.RoleRef == o.RoleRef && equality.Semantic.DeepEqual(s.Subjects, o.Subjects), nil
	case *rbacv1.RoleBinding:
		s := stored.(*rbacv1.RoleBinding)
		return s.RoleRef == o.RoleRef && equality.Semantic.DeepEqual(s.Subjects, o.Subjects), nil
	}
	return false, nil
}

func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// ruleOwners reads and writes Roles (or, with cluster, ClusterRoles) for the reconciliation.
type ruleOwners struct {
	ctx     context.Context
	c       client.Client
	cluster bool
}

func (m ruleOwners) Get(namespace, name string) (reconciliation.RuleOwner, error) {
	if m.cluster {
		r := &rbacv1.ClusterRole{}
		if err := m.c.Get(m.ctx, client.ObjectKey{Name: name}, r); err != nil {
			return nil, err
		}
		return reconciliation.ClusterRoleRuleOwner{ClusterRole: r}, nil
	}
	r := &rbacv1.Role{}
	if err := m.c.Get(m.ctx, client.ObjectKey{Namespace: namespace, Name: name}, r); err != nil {
		return nil, err
	}
	return reconciliation.RoleRuleOwner{Role: r}, nil
}

func (m ruleOwners) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	return in, m.c.Create(m.ctx, in.GetObject().(client.Object))
}

func (m ruleOwners) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	return in, m.c.Update(m.ctx, in.GetObject().(client.Object))
}

// bindings reads and writes RoleBindings (or, with cluster, ClusterRoleBindings) for the
// reconciliation, which recreates a binding whose roleRef changed (roleRef is immutable).
type bindings struct {
	ctx     context.Context
	c       client.Client
	cluster bool
}

func (m bindings) Get(namespace, name string) (reconciliation.RoleBinding, error) {
	if m.cluster {
		b := &rbacv1.ClusterRoleBinding{}
		if err := m.c.Get(m.ctx, client.ObjectKey{Name: name}, b); err != nil {
			return nil, err
		}
		return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: b}, nil
	}
	b := &rbacv1.RoleBinding{}
	if err := m.c.Get(m.ctx, client.ObjectKey{Namespace: namespace, Name: name}, b); err != nil {
		return nil, err
	}
	return reconciliation.RoleBindingAdapter{RoleBinding: b}, nil
}

func (m bindings) Delete(namespace, name string, uid types.UID) error {
	var obj client.Object = &rbacv1.RoleBinding{}
	if m.cluster {
		obj = &rbacv1.ClusterRoleBinding{}
	}
	obj.SetNamespace(namespace)
	obj.SetName(name)
	return m.c.Delete(m.ctx, obj, client.Preconditions{UID: &uid})
}

func (m bindings) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	return in, m.c.Create(m.ctx, in.GetObject().(client.Object))
}

func (m bindings) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	return in, m.c.Update(m.ctx, in.GetObject().(client.Object))
}
