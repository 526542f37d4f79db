package storage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"
	. "github.com/onsi/gomega"
	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// bigConfigMap is alike from one cluster to the next but for its identity, a random value and
// the fields every part of the object has (labels, annotations, managed fields, binary data).
func bigConfigMap(cluster string, i int, r *rand.Rand) *corev1.ConfigMap {
	obj := created(fmt.Sprintf("cm-%d", i), strings.Repeat("kube-system coredns kubeadm-config ", 8))
	obj.Labels = map[string]string{"app.kubernetes.io/name": "addon", "cluster": cluster}
	obj.Annotations = map[string]string{"random": fmt.Sprint(r.Uint64()), "kubeadm.kubernetes.io/hash": "0123456789abcdef"}
	obj.Data["random"] = fmt.Sprintf("%x", r.Uint64())
	obj.Data[fmt.Sprintf("only-%d", i)] = ""
	obj.BinaryData = map[string][]byte{"bin": {0, 1, 2, 0xff, byte(i)}}
	obj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
		APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:k":{}}}`)}}}
	return obj
}

// Values of 128 bytes or more are compressed against their resource's dictionary once it has
// one; every object, and the exact bytes of its value, come back after a restart, and the
// restarted process compresses with the dictionary on disk rather than making another.
func TestCompressedValuesSurviveRestartExactly(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	r := rand.New(rand.NewPCG(1, 2))
	clusters := []string{"a", "b", "c", "d"}
	stored := map[string]map[string]client.Object{}
	for _, name := range clusters {
		o := NewObjects(name, testHistory, db)
		_, err := o.Load(decodeConfigMaps)
		g.Expect(err).NotTo(HaveOccurred())
		stored[name] = map[string]client.Object{}
		for i := range 30 {
			obj := bigConfigMap(name, i, r)
			o.Put(configMaps, obj, nil)
			stored[name][obj.Name] = obj
		}
		// Changes and deletions of objects written compressed and not.
		for _, i := range []int{0, 7, 29} {
			old := stored[name][fmt.Sprintf("cm-%d", i)]
			changed := old.DeepCopyObject().(*corev1.ConfigMap)
			changed.Data["random"] = "changed"
			o.Put(configMaps, changed, old)
			stored[name][changed.Name] = changed
		}
		old := stored[name]["cm-3"]
		o.Delete(configMaps, old, old.DeepCopyObject().(client.Object))
		delete(stored[name], "cm-3")
		g.Expect(o.LastCommit().Wait()).To(Succeed())
	}
	compressed := 0
	for _, name := range clusters {
		raw, _, _ := load(t, db, name)
		for _, v := range raw {
			if v[0] == encodingCompressed {
				compressed++
			}
		}
	}
	g.Expect(compressed).To(BeNumerically(">", 60), "the values after the first dictWrites are compressed")
	dicts := dictionariesOnDisk(g, db)
	g.Expect(dicts).To(HaveLen(1), "one dictionary for the resource")
	g.Expect(db.Close()).To(Succeed())

	db, err = Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	loaded := map[string]*Objects{}
	for _, name := range clusters {
		o := NewObjects(name, testHistory, db)
		found, err := o.Load(func(gr schema.GroupResource, value []byte) (schema.GroupResource, client.Object, error) {
			gr, obj, err := decodeConfigMaps(gr, value)
			if err == nil {
				want, err := encodeValue(stored[name][obj.GetName()])()
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(value).To(Equal(want), "%s/%s: the value as it was encoded", name, obj.GetName())
			}
			return gr, obj, err
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(found).To(BeTrue())
		g.Expect(o.Resource(configMaps)).To(HaveLen(len(stored[name])))
		for key, want := range stored[name] {
			got := o.Get(configMaps, "default/"+key)
			g.Expect(equality.Semantic.DeepEqual(got, want)).To(BeTrue(), "%s/%s reads what it stored", name, key)
		}
		loaded[name] = o
	}
	// Writes after the restart (all clusters loaded, as at start) use the dictionary on disk.
	for name, o := range loaded {
		o.Put(configMaps, bigConfigMap(name, 100, r), nil)
		g.Expect(o.LastCommit().Wait()).To(Succeed())
		raw, _, _ := load(t, db, name)
		g.Expect(raw[db.diskKey(configMaps, "default/cm-100")][0]).To(Equal(encodingCompressed))
	}
	g.Expect(dictionariesOnDisk(g, db)).To(Equal(dicts))
}

func dictionariesOnDisk(g Gomega, db *DB) map[string][]byte {
	out := map[string][]byte{}
	g.Expect(db.bolt.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(dictBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = bytes.Clone(v)
			return nil
		})
	})).To(Succeed())
	return out
}

// A dictionary no value uses any more goes when the file is opened; the clusters' buckets are
// not listed with it.
func TestUnusedDictionariesAreSweptOnOpen(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	r := rand.New(rand.NewPCG(3, 4))
	for _, name := range []string{"a", "b"} {
		o := NewObjects(name, testHistory, db)
		for i := range 2 * dictWrites {
			o.Put(configMaps, bigConfigMap(name, i, r), nil)
		}
		g.Expect(o.LastCommit().Wait()).To(Succeed())
	}
	g.Expect(dictionariesOnDisk(g, db)).To(HaveLen(1))
	g.Expect(db.Buckets()).To(ConsistOf("a", "b"))
	g.Expect(db.Close()).To(Succeed())

	db, err = Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dictionariesOnDisk(g, db)).To(HaveLen(1), "still used")
	g.Expect(db.DropBucket("a").Wait()).To(Succeed())
	g.Expect(db.DropBucket("b").Wait()).To(Succeed())
	g.Expect(db.Close()).To(Succeed())

	db, err = Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	g.Expect(dictionariesOnDisk(g, db)).To(BeEmpty())
}

// A value that reads as compressed but whose dictionary is missing fails the cluster's load
// rather than giving it without the object.
func TestCompressedValueWithoutItsDictionaryFailsTheLoad(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	d := &dictionary{id: 7, data: []byte("some dictionary, long enough")}
	v, err := encodeValue(cm("x", strings.Repeat("some dictionary ", 20)))()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(db.Put("a", "/configmaps/default/x", 1, func() ([]byte, error) { return d.compress(v) }).Wait()).To(Succeed())
	_, err = NewObjects("a", testHistory, db).Load(decodeConfigMaps)
	g.Expect(err).To(MatchError(ErrUnreadable))
	g.Expect(err).To(MatchError(ContainSubstring("dictionary 7 is missing")))
}

func FuzzDictionaryCoder(f *testing.F) {
	f.Add([]byte("kube-system/coredns kube-proxy"), []byte("kube-system/kube-proxy coredns coredns coredns"))
	f.Add([]byte{}, []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"))
	f.Add([]byte("abcdefghijklmnopqrstuvwxyz"), []byte{})
	f.Add([]byte("abcd"), []byte("abcdabcdabcdxabcd"))
	f.Add([]byte(strings.Repeat("metadata spec status ", 400)), []byte(strings.Repeat("metadata spec status x", 100)))
	f.Fuzz(func(t *testing.T, dict, v []byte) {
		if len(dict) > 60000 {
			dict = dict[:60000]
		}
		d := &dictionary{id: 3, data: dict}
		c, err := d.compress(v)
		if len(dict) < s2.MinDictSize {
			if err == nil {
				t.Fatalf("compressed with a dictionary of %d bytes", len(dict))
			}
			return
		}
		if err != nil {
			t.Fatalf("compress: %v", err)
		}
		got, err := d.decompress(nil, c)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("round trip: %v, %q != %q", err, got, v)
		}
		// A damaged value gives an error or some bytes, never a panic.
		for i := range c {
			bad := bytes.Clone(c)
			bad[i] ^= 0x5a
			_, _ = d.decompress(nil, bad)
			_, _ = d.decompress(nil, c[:i])
		}
		// Nor does a value made of arbitrary bytes after the header.
		_, _ = d.decompress(nil, append([]byte{encodingCompressed, codecS2, 3}, v...))
	})
}

// A value of a codec this build does not know fails its load with the codec named.
func TestUnknownCodec(t *testing.T) {
	g := NewWithT(t)
	d := &dictionary{id: 3, data: []byte("some dictionary, long enough")}
	c, err := d.compress([]byte(strings.Repeat("some dictionary ", 20)))
	g.Expect(err).NotTo(HaveOccurred())
	c[1] = 9
	_, err = d.decompress(nil, c)
	g.Expect(err).To(MatchError(ContainSubstring("unknown codec 9")))
}

// Many resources written interleaved, in batches of one resource and of many: every value after
// the dictionaries were made is compressed with its own, and comes back exactly.
func TestInterleavedResourcesCompressWithTheirDictionaries(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	r := rand.New(rand.NewPCG(5, 6))
	const resources = 9
	want := map[string][]byte{}
	var last Commit
	for i := range dictWrites + 40 {
		for res := range resources {
			obj := bigConfigMap(fmt.Sprintf("r%d", res), i, r)
			obj.Data["resource"] = strings.Repeat(fmt.Sprintf("resource %d ", res), 10)
			v, err := encodeValue(obj)()
			g.Expect(err).NotTo(HaveOccurred())
			key := fmt.Sprintf("g/r%d/default/cm-%d", res, i)
			want[key] = v
			last = db.putObject("a", key, fmt.Sprintf("g/r%d", res), uint64(len(want)), func() ([]byte, error) { return v, nil })
		}
		if i%7 == 0 {
			g.Expect(last.Wait()).To(Succeed()) // batches of one resource and of many
		}
	}
	g.Expect(last.Wait()).To(Succeed())
	g.Expect(dictionariesOnDisk(g, db)).To(HaveLen(resources))
	raw, _, _ := load(t, db, "a")
	compressed := 0
	for _, v := range raw {
		if v[0] == encodingCompressed {
			compressed++
		}
	}
	g.Expect(compressed).To(BeNumerically(">=", resources*40))
	got := map[string][]byte{}
	_, _, err = db.load("a", true, func(k string, v []byte) error {
		got[k] = bytes.Clone(v)
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(want))
}
