package store

import (
	"crypto/sha256"
	"encoding/json"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Clusters built from one template install the same CRDs (a CNI, cert-manager, CAPI's own):
// what a CRD's spec builds (structural schemas, validators, compiled CEL programs, printers) is
// immutable, so every cluster holding an identical spec shares one build. Entries are counted
// by their users and dropped with the last, so CRD churn does not pin old builds.
var customKindCache = struct {
	sync.Mutex
	entries map[specKey]*cachedKind
}{entries: map[specKey]*cachedKind{}}

type specKey [sha256.Size]byte

type cachedKind struct {
	kind customKind
	refs int
}

// customKindKey identifies what a CRD builds: its spec (names, scope, versions, schemas,
// conversion); metadata and status do not change it.
func customKindKey(crd *apiextensionsv1.CustomResourceDefinition) (specKey, error) {
	data, err := json.Marshal(&crd.Spec)
	if err != nil {
		return specKey{}, err
	}
	return sha256.Sum256(data), nil
}

// acquireCustomKind returns the build of crd's spec, building it if no cluster holds it yet.
// Each successful call is paired with one releaseCustomKind of the returned key.
func acquireCustomKind(crd *apiextensionsv1.CustomResourceDefinition) (customKind, error) {
	key, err := customKindKey(crd)
	if err != nil {
		return customKind{}, err
	}
	customKindCache.Lock()
	defer customKindCache.Unlock()
	if e, ok := customKindCache.entries[key]; ok {
		e.refs++
		return e.kind, nil
	}
	// Built under the cache's lock: two clusters creating the same CRD at once build it once.
	ck, err := buildCustomKind(crd)
	if err != nil {
		return customKind{}, err
	}
	ck.key = key
	customKindCache.entries[key] = &cachedKind{kind: ck, refs: 1}
	return ck, nil
}

// releaseCustomKind drops one user of a build.
func releaseCustomKind(key specKey) {
	customKindCache.Lock()
	defer customKindCache.Unlock()
	if e, ok := customKindCache.entries[key]; ok {
		if e.refs--; e.refs <= 0 {
			delete(customKindCache.entries, key)
		}
	}
}

// customKindUsers is the number of clusters sharing the build of crd's spec.
func customKindUsers(crd *apiextensionsv1.CustomResourceDefinition) int {
	key, _ := customKindKey(crd)
	customKindCache.Lock()
	defer customKindCache.Unlock()
	if e, ok := customKindCache.entries[key]; ok {
		return e.refs
	}
	return 0
}
