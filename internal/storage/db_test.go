package storage

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	bolt "go.etcd.io/bbolt"
)

func value(s string) func() ([]byte, error) { return func() ([]byte, error) { return []byte(s), nil } }

func load(t *testing.T, db *DB, bucket string) (map[string]string, uint64, bool) {
	t.Helper()
	got := map[string]string{}
	rv, found, err := db.Load(bucket, func(k string, v []byte) error {
		got[k] = string(v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, rv, found
}

func TestWritesSurviveReopenInQueueOrder(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(db.Put("a", "/configmaps/default/x", 5, value("v1")).Wait()).To(Succeed())
	// Queued back to back, likely in one batch: the later write of a key wins.
	c1 := db.Put("a", "/configmaps/default/x", 6, value("v2"))
	c2 := db.Put("a", "/configmaps/default/y", 7, value("y"))
	c3 := db.Delete("a", "/configmaps/default/y", 8)
	c4 := db.Put("b", "/nodes/n", 3, value("node"))
	for _, c := range []Commit{c1, c2, c3, c4} {
		g.Expect(c.Wait()).To(Succeed())
	}
	g.Expect(db.Close()).To(Succeed())

	db, err = Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	got, rv, found := load(t, db, "a")
	g.Expect(found).To(BeTrue())
	g.Expect(rv).To(Equal(uint64(8)))
	g.Expect(got).To(Equal(map[string]string{"/configmaps/default/x": "v2"}))
	got, rv, _ = load(t, db, "b")
	g.Expect(rv).To(Equal(uint64(3)))
	g.Expect(got).To(HaveKeyWithValue("/nodes/n", "node"))
	g.Expect(db.Buckets()).To(ConsistOf("a", "b"))

	g.Expect(db.DropBucket("a").Wait()).To(Succeed())
	_, _, found = load(t, db, "a")
	g.Expect(found).To(BeFalse())
	g.Expect(db.Buckets()).To(ConsistOf("b"))
}

func TestConcurrentWritersShareCommits(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()

	const writers, each = 16, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := db.Put("c", fmt.Sprintf("/k/%d/%d", w, i), uint64(i+1), value("x")).Wait(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s := db.Stats()
	g.Expect(s.Writes).To(Equal(uint64(writers * each)))
	// Group commit: writers that queue while a transaction syncs share the next one.
	g.Expect(s.Batches).To(BeNumerically("<", s.Writes))
	got, _, _ := load(t, db, "c")
	g.Expect(got).To(HaveLen(writers * each))
}

// TestEncodeErrorFailsItsBucketUntilRecovered: a value that cannot be encoded fails like a failed
// transaction: its bucket's later writes fail until Recover, then proceed.
func TestEncodeErrorFailsItsBucketUntilRecovered(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	bad := db.Put("d", "/k", 1, func() ([]byte, error) { return nil, fmt.Errorf("boom") })
	g.Expect(bad.Wait()).To(MatchError(ContainSubstring("boom")))
	g.Expect(db.Put("d", "/k1", 2, value("fenced")).Wait()).To(MatchError(ErrEarlierWriteFailed))
	db.Recover("d")
	g.Expect(db.Put("d", "/k2", 2, value("ok")).Wait()).To(Succeed())
	got, _, _ := load(t, db, "d")
	g.Expect(got).To(Equal(map[string]string{"/k2": "ok"}))
}

func TestSecondOpenOfALockedDirectoryFails(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	_, err = Open(dir)
	g.Expect(err).To(HaveOccurred())
}

func TestWritesAfterCloseFail(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(db.Close()).To(Succeed())
	g.Expect(db.Put("e", "/k", 1, value("x")).Wait()).To(MatchError(ErrClosed))
}

// TestFailedWriteFailsItsBucketOnly: a write that cannot be committed fails with every later
// write of its bucket (they may build on it) until the bucket's owner calls Recover, while the
// other buckets' writes of the same batch land; nothing of the failed bucket reaches the disk.
func TestFailedWriteFailsItsBucketOnly(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(db.Put("a", "before", 1, value("ok")).Wait()).To(Succeed())

	injected := errors.New("injected: no space left on device")
	db.InjectFault(func(bucket, key string) error {
		if bucket == "a" && key == "bad" {
			return injected
		}
		return nil
	})
	// The committer is held in the previous batch until all three are queued: they share one.
	encoding, release := make(chan struct{}), make(chan struct{})
	held := db.Put("c", "held", 1, func() ([]byte, error) {
		close(encoding)
		<-release
		return []byte("h"), nil
	})
	<-encoding
	bad := db.Put("a", "bad", 2, value("x"))
	other := db.Put("b", "y", 5, value("y"))
	later := db.Put("a", "later", 3, value("z"))
	close(release)
	g.Expect(held.Wait()).To(Succeed())
	g.Expect(bad.Wait()).To(MatchError(injected))
	g.Expect(later.Wait()).To(HaveOccurred())
	g.Expect(other.Wait()).To(Succeed(), "another bucket's write in the same batch")

	// Fenced: the bucket's writes fail until its owner has undone what it queued.
	g.Expect(db.Put("a", "fenced", 4, value("f")).Wait()).To(MatchError(ErrEarlierWriteFailed))
	g.Expect(db.Put("b", "z", 6, value("z")).Wait()).To(Succeed())
	db.Recover("a")
	g.Expect(db.Put("a", "after", 2, value("after")).Wait()).To(Succeed())

	a, rv, _ := load(t, db, "a")
	g.Expect(a).To(Equal(map[string]string{"before": "ok", "after": "after"}))
	g.Expect(rv).To(BeEquivalentTo(2))
	b, _, _ := load(t, db, "b")
	g.Expect(b).To(Equal(map[string]string{"y": "y", "z": "z"}))
	g.Expect(db.Close()).To(Succeed())
}

// TestReleasedPagesReadBack: the file's mapped pages given back between writes (releaseMapped)
// read back as they were, while later writes grow the file and readers load concurrently.
func TestReleasedPagesReadBack(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	want := map[string]string{}
	var readers sync.WaitGroup
	for round := range 20 {
		var commits []Commit
		for i := range 200 {
			key := fmt.Sprintf("/pods/default/p-%d-%d", round, i)
			want[key] = fmt.Sprintf("%0512d", round*1000+i) // enough to grow the file and remap it
			commits = append(commits, db.Put("c", key, uint64(round*1000+i+1), value(want[key])))
		}
		for _, c := range commits {
			g.Expect(c.Wait()).To(Succeed())
		}
		readers.Go(func() { _, _, _ = db.Load("c", func(string, []byte) error { return nil }) })
		db.releaseMapped()
	}
	readers.Wait()
	got, _, found := load(t, db, "c")
	g.Expect(found).To(BeTrue())
	g.Expect(got).To(Equal(want))
}

// A Commit handle outlives its write (every cluster keeps the one of its last write), so a
// committed batch must not keep what its writes' encoders captured: superseded object versions.
func TestCommittedWriteReleasesItsEncoder(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	released := make(chan struct{})
	commit := func() Commit {
		obj := &struct{ data [4096]byte }{}
		runtime.AddCleanup(obj, func(ch chan struct{}) { close(ch) }, released)
		return db.Put("c1", "k", 1, func() ([]byte, error) { return obj.data[:8], nil })
	}()
	g.Expect(commit.Wait()).To(Succeed())
	g.Eventually(func() bool {
		runtime.GC()
		select {
		case <-released:
			return true
		default:
			return false
		}
	}, 5*time.Second, 10*time.Millisecond).Should(BeTrue(), "the encoder's object is unreachable once its write is on disk")
	runtime.KeepAlive(commit)
}

// TestWritesNobodyWaitsForShareACommit: writes queued without waiting stay pending (here, with
// gathering that never times out) and go to disk in one transaction as soon as somebody waits for
// any of them; a later waited write commits at once, gathering nothing; Close commits what is
// still gathering.
func TestWritesNobodyWaitsForShareACommit(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := open(dir, time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = db.Close() }()

	var commits []Commit
	for i := range 40 {
		commits = append(commits, db.Put("c", fmt.Sprintf("/k/%d", i), uint64(i+1), value("x")))
		if i%10 == 0 {
			time.Sleep(time.Millisecond) // the committer wakes up in between
		}
	}
	g.Expect(db.Stats().Batches).To(BeZero(), "committed before anybody waited")
	g.Expect(commits[0].Done()).To(BeFalse())
	g.Expect(commits[20].Wait()).To(Succeed())
	g.Expect(db.Stats()).To(Equal(Stats{Batches: 1, Writes: 40, Bytes: db.Stats().Bytes}))
	for _, c := range commits {
		g.Expect(c.Done()).To(BeTrue())
	}

	g.Expect(db.Put("c", "/k/last", 41, value("y")).Wait()).To(Succeed())
	g.Expect(db.Stats().Batches).To(Equal(uint64(2)))

	// Close commits what is still gathering (here it would gather for an hour).
	db.Put("c", "/k/unwaited", 42, value("z"))
	g.Expect(db.Close()).To(Succeed())
	db, err = Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	got, _, _ := load(t, db, "c")
	g.Expect(got).To(HaveLen(42))
}

// TestKeysWrittenInOrderFillPages: a cluster's keys mostly arrive in order; their pages end up
// filled to fillPercent, not half empty as at bbolt's default split.
func TestKeysWrittenInOrderFillPages(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	var last Commit
	for i := range 2000 {
		last = db.Put("c", fmt.Sprintf("/k/%05d", i), uint64(i+1), value(strings.Repeat("v", 100)))
		if i%50 == 49 {
			g.Expect(last.Wait()).To(Succeed()) // many transactions, as a fleet's writes come
		}
	}
	g.Expect(last.Wait()).To(Succeed())
	g.Expect(db.bolt.View(func(tx *bolt.Tx) error {
		s := tx.Bucket([]byte("c")).Stats()
		fill := float64(s.LeafInuse) / float64(s.LeafPageN*db.bolt.Info().PageSize)
		g.Expect(fill).To(BeNumerically(">", 0.8), "leaf pages %d, %d bytes in use", s.LeafPageN, s.LeafInuse)
		return nil
	})).To(Succeed())
}
