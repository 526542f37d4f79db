package apiserver

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// durableServeEnv makes the test binary an API server process whose cluster is kept in the
// state directory it names (TestServeDurable).
const durableServeEnv = "GOOFY_APISERVER_DURABLE_SERVE"

// TestServeDurable is not a test: with durableServeEnv set it serves one durable cluster on
// loopback HTTP, prints its address and runs until killed or stdin closes.
func TestServeDurable(t *testing.T) {
	dir := os.Getenv(durableServeEnv)
	if dir == "" {
		return
	}
	db, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := store.NewManager(store.WithStorage(db)).AddCluster("crash", store.ClusterOptions{KubernetesVersion: testVersion})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: NewHandler(c, Options{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("ADDR %s\n", ln.Addr())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = srv.Close()
	_ = db.Close()
}

// startDurableServer runs TestServeDurable in a child process on dir and returns a clientset for
// it and the process.
func startDurableServer(t *testing.T, dir string) (*kubernetes.Clientset, *exec.Cmd) {
	t.Helper()
	addr, cmd := startServerProcess(t, "TestServeDurable", durableServeEnv+"="+dir)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr, QPS: -1, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cs, cmd
}

// TestSIGKILLLosesNoAcknowledgedWrite: 16 clients create and update ConfigMaps against a server
// process with durable state while a client-go watch follows them; the process is SIGKILLed in
// the middle of the storm and started again on the same directory. Every write that got a 2xx is
// there, every change the watch saw is there (changes are delivered once on disk, not before), no
// object is torn (the state loads), a write that was in flight is either wholly there or wholly
// absent, and resourceVersions continue above every one handed out before.
func TestSIGKILLLosesNoAcknowledgedWrite(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	cs, cmd := startDurableServer(t, dir)

	type version struct{ acked, inFlight string } // data["v"] of the last acknowledged and the pending write
	const writers = 16
	var (
		mu       sync.Mutex
		versions = map[string]*version{}
		maxRV    string
		acked    int
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watcher, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	seen := map[string]string{} // data["v"] of the last change the watch delivered, by name
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range watcher.ResultChan() { // ends when the server is killed
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type != "DELETED" {
				mu.Lock()
				seen[cm.Name] = cm.Data["v"]
				mu.Unlock()
			}
		}
	}()
	var wg sync.WaitGroup
	payload := strings.Repeat("x", 2048)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cms := cs.CoreV1().ConfigMaps("default")
			for i := 0; ctx.Err() == nil && i < 100000; i++ {
				name := fmt.Sprintf("w%d-%d", w, i/4) // each name: a create, then three updates
				v := fmt.Sprintf("%d-%d", w, i)
				mu.Lock()
				ver := versions[name]
				if ver == nil {
					ver = &version{}
					versions[name] = ver
				}
				ver.inFlight = v
				mu.Unlock()
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": v, "pad": payload}}
				var out *corev1.ConfigMap
				var err error
				if i%4 == 0 {
					out, err = cms.Create(ctx, cm, metav1.CreateOptions{})
				} else {
					out, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
				}
				if err != nil {
					return // the server is gone
				}
				mu.Lock()
				ver.acked, ver.inFlight = v, ""
				acked++
				if len(out.ResourceVersion) > len(maxRV) || len(out.ResourceVersion) == len(maxRV) && out.ResourceVersion > maxRV {
					maxRV = out.ResourceVersion
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	g.Expect(cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	wg.Wait()
	<-watched
	t.Logf("%d writes acknowledged in 1.5 s by %d clients before SIGKILL, %d objects seen by the watch", acked, writers, len(seen))
	g.Expect(seen).NotTo(BeEmpty(), "the watch saw nothing")
	g.Expect(acked).To(BeNumerically(">", writers), "the storm did not get going")

	cs, _ = startDurableServer(t, dir)
	list, err := cs.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	got := map[string]corev1.ConfigMap{}
	for _, cm := range list.Items {
		got[cm.Name] = cm
	}
	for name, ver := range versions {
		cm, ok := got[name]
		if ver.acked == "" {
			// Never acknowledged: absent, or the whole create landed.
			if ok {
				g.Expect(cm.Data["v"]).To(Equal(ver.inFlight), name)
			}
			continue
		}
		g.Expect(ok).To(BeTrue(), "acknowledged %s is gone", name)
		g.Expect(cm.Data["v"]).To(BeElementOf(ver.acked, ver.inFlight), "%s holds neither its acknowledged nor its in-flight write", name)
		g.Expect(cm.Data["pad"]).To(Equal(payload), "%s is torn", name)
	}
	// writeIndex is the position of a write "W-I" in its writer's sequence.
	writeIndex := func(v string) int {
		i, err := strconv.Atoi(v[strings.IndexByte(v, '-')+1:])
		g.Expect(err).NotTo(HaveOccurred(), v)
		return i
	}
	for name, v := range seen {
		cm, ok := got[name]
		g.Expect(ok).To(BeTrue(), "%s, which the watch saw, is gone", name)
		g.Expect(writeIndex(cm.Data["v"])).To(BeNumerically(">=", writeIndex(v)), "%s: the watch saw write %s, the state holds the older %s", name, v, cm.Data["v"])
	}
	next, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(next.ResourceVersion) > len(maxRV) || len(next.ResourceVersion) == len(maxRV) && next.ResourceVersion > maxRV).
		To(BeTrue(), "resourceVersion %s after the restart is not above %s", next.ResourceVersion, maxRV)
}
