package etcd

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// StateConfigMapName is the ConfigMap in the workload cluster's kube-system
	// namespace that holds the etcd state.
	//
	// Why a ConfigMap of its own rather than annotations on the etcd pods: the
	// state is one consistent record (who leads depends on who is a member and
	// the term counts both), pods are written by other controllers and may not
	// exist yet when a member is added or any more when it is removed, and a
	// single object is written atomically in one call.
	StateConfigMapName = "goofy-etcd-state"
	// StateKey is the ConfigMap data key holding the JSON state.
	StateKey = "state.json"
)

// stateStore reads and writes the state through the workload cluster's client.
// The Server is the only writer, so a conflict means the object was touched by
// hand: the Server's view wins and is written again.
type stateStore struct {
	c  client.Client
	cm *corev1.ConfigMap // last read or written, nil if it does not exist
}

func (s *stateStore) key() client.ObjectKey {
	return client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: StateConfigMapName}
}

func (s *stateStore) load(ctx context.Context) (state, error) {
	cm := &corev1.ConfigMap{}
	if err := s.c.Get(ctx, s.key(), cm); err != nil {
		if apierrors.IsNotFound(err) {
			return state{}, nil
		}
		return state{}, err
	}
	s.cm = cm
	var st state
	raw, ok := cm.Data[StateKey]
	if !ok {
		return state{}, nil
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return state{}, fmt.Errorf("ConfigMap %s key %s: %w", s.key(), StateKey, err)
	}
	return st, nil
}

func (s *stateStore) save(ctx context.Context, st *state) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if s.cm == nil {
		err := s.create(ctx, raw)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := s.refresh(ctx); err != nil {
			return err
		}
	}
	err = s.update(ctx, raw)
	switch {
	case apierrors.IsConflict(err):
		if err := s.refresh(ctx); err != nil {
			return err
		}
		return s.update(ctx, raw)
	case apierrors.IsNotFound(err):
		// Deleted behind our back: write it anew.
		return s.create(ctx, raw)
	}
	return err
}

func (s *stateStore) create(ctx context.Context, raw []byte) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem,
			Name:      StateConfigMapName,
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "goofy"},
		},
		Data: map[string]string{StateKey: string(raw)},
	}
	if err := s.c.Create(ctx, cm); err != nil {
		return err
	}
	s.cm = cm
	return nil
}

func (s *stateStore) update(ctx context.Context, raw []byte) error {
	cm := s.cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[StateKey] = string(raw)
	if err := s.c.Update(ctx, cm); err != nil {
		return err
	}
	s.cm = cm
	return nil
}

func (s *stateStore) refresh(ctx context.Context) error {
	cm := &corev1.ConfigMap{}
	if err := s.c.Get(ctx, s.key(), cm); err != nil {
		return err
	}
	s.cm = cm
	return nil
}
