package storage

import (
	"bytes"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// toLegacyFile rewrites the file in dir as it was written before the resources' codes: every
// object's key "<group>/<resource>/<Key>", no code bucket.
func toLegacyFile(g Gomega, dir string) {
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(db.bolt.Update(func(tx *bolt.Tx) error {
		err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if ownBucket(name) {
				return nil
			}
			type kv struct{ k, v []byte }
			var coded []kv
			err := b.ForEach(func(k, v []byte) error {
				if len(k) > 0 && k[0] == keyCoded {
					coded = append(coded, kv{bytes.Clone(k), bytes.Clone(v)})
				}
				return nil
			})
			for _, e := range coded {
				gr, key, old, ok := db.parseKey(string(e.k))
				g.Expect(ok && !old).To(BeTrue())
				g.Expect(b.Delete(e.k)).To(Succeed())
				g.Expect(b.Put([]byte(legacyKey(gr, key)), e.v)).To(Succeed())
			}
			return err
		})
		if err != nil {
			return err
		}
		return tx.DeleteBucket(resourceBucket)
	})).To(Succeed())
	g.Expect(db.Close()).To(Succeed())
}

// keysOnDisk lists bucket's object keys as they are on disk.
func keysOnDisk(g Gomega, db *DB, bucket string) []string {
	var keys []string
	_, _, err := db.Load(bucket, func(k string, _ []byte) error {
		keys = append(keys, k)
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	return keys
}

// A file written before the resources' codes (keys naming the resource in full, references to
// shared content, values whole) loads with every object as it was; the load rewrites each under
// its coded key, and the next process finds them there, nothing lost.
func TestFileWithLegacyKeysLoadsAndMovesToCodedKeys(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	stored := map[string]map[string]client.Object{}
	for _, n := range []string{"a", "b"} {
		o := sharedObjects(n, db)
		stored[n] = map[string]client.Object{}
		for i := range 3 {
			obj := created(fmt.Sprintf("policy-%d", i), t.Name()) // shared: b writes references
			o.Put(configMaps, obj, nil)
			stored[n]["cm/"+obj.Name] = obj
			own := created(fmt.Sprintf("own-%d", i), "of "+n)
			o.Put(secrets, own, nil)
			stored[n]["secret/"+own.Name] = own
		}
		g.Expect(o.LastCommit().Wait()).To(Succeed())
	}
	raw, _, _ := load(t, db, "b")
	refs := 0
	for _, v := range raw {
		if v[0] == encodingShared {
			refs++
		}
	}
	g.Expect(refs).To(Equal(3), "b holds references")
	g.Expect(db.Close()).To(Succeed())
	toLegacyFile(g, dir)

	for round := range 2 {
		db, err = Open(dir)
		g.Expect(err).NotTo(HaveOccurred())
		for _, n := range []string{"a", "b"} {
			keys := keysOnDisk(g, db, n)
			g.Expect(keys).To(HaveLen(6))
			for _, k := range keys {
				_, _, old, ok := db.parseKey(k)
				g.Expect(ok).To(BeTrue())
				g.Expect(old).To(Equal(round == 0), "%q: legacy before the first load, coded after", k)
			}
			o := sharedObjects(n, db)
			found, err := o.Load(func(gr schema.GroupResource, v []byte) (schema.GroupResource, client.Object, error) {
				_, obj, err := decodeConfigMaps(gr, v)
				return gr, obj, err // configmaps, and secrets that hold ConfigMaps here
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(BeTrue())
			g.Expect(o.Resource(configMaps)).To(HaveLen(3))
			g.Expect(o.Resource(secrets)).To(HaveLen(3))
			for k, want := range stored[n] {
				gr := configMaps
				if k[:3] == "sec" {
					gr = secrets
				}
				got := o.Get(gr, "default/"+want.GetName())
				g.Expect(equality.Semantic.DeepEqual(got, want)).To(BeTrue(), "%s %s reads what it stored", n, k)
			}
			g.Expect(o.LastCommit().Wait()).To(Succeed())
			g.Expect(keysOnDisk(g, db, n)).To(HaveLen(6), "each object under one key")
		}
		n, _, err := db.SharedContents()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(3), "the shared content is still found, and swept by nobody")
		g.Expect(db.Close()).To(Succeed())
	}
}
