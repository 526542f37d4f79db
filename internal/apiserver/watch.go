package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	apistorage "k8s.io/apiserver/pkg/storage"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// minWatchTimeout is upstream's --min-request-timeout: a watch without timeoutSeconds ends
// after a random time between it and twice it, so clients re-list/re-watch like they must.
const minWatchTimeout = 30 * time.Minute

// WatchWriteLimit bounds how long writing one watch event may take. A client that stopped
// reading fills the connection's buffers and then blocks the write: kube-apiserver's watch
// cache ends a watcher whose buffer stays full past its dispatch budget ("Forcing watcher close
// due to unresponsiveness"), and the write itself is bounded here, so that such a watch ends
// after Timeout and frees what it holds. Exceeded is called when one does.
type WatchWriteLimit struct {
	Timeout  time.Duration
	Exceeded func()
}

type watchWriteLimitKey struct{}

// WithWatchWriteLimit returns ctx with the write limit of the watch served with it.
func WithWatchWriteLimit(ctx context.Context, l WatchWriteLimit) context.Context {
	return context.WithValue(ctx, watchWriteLimitKey{}, l)
}

// eventWriter writes and flushes one event at a time, each within the write limit.
type eventWriter struct {
	rc    *http.ResponseController
	limit WatchWriteLimit
}

// start arms the deadline of the next write; done clears it (an idle watch has no deadline)
// and reports whether the write ended by it.
func (e *eventWriter) start() time.Time {
	if e.limit.Timeout <= 0 {
		return time.Time{}
	}
	deadline := time.Now().Add(e.limit.Timeout)
	if e.rc.SetWriteDeadline(deadline) != nil {
		return time.Time{} // the writer cannot: no limit
	}
	return deadline
}

func (e *eventWriter) done(deadline time.Time, ok bool) bool {
	if deadline.IsZero() {
		return ok
	}
	if !ok {
		if !time.Now().Before(deadline) && e.limit.Exceeded != nil {
			e.limit.Exceeded()
		}
		return false
	}
	return e.rc.SetWriteDeadline(time.Time{}) == nil
}

// watchStream is an open watch: newline-delimited WatchEvents in JSON, length-prefixed frames in
// protobuf, each flushed as soon as it is written. openWatch sets it up and writes the response
// headers; run streams the events.
type watchStream struct {
	h         *handler
	rq        *reqScope
	watcher   *store.Watcher
	ctx       context.Context
	cancel    context.CancelFunc
	framer    io.Writer
	events    eventWriter
	convert   *schema.GroupVersionKind // PartialObjectMetadata or Table; nil: the objects themselves
	tableOpts *metav1.TableOptions
	// objEnc encodes the objects, statusEnc Status objects (ERROR events), eventEnc the events.
	objEnc, statusEnc, eventEnc runtime.Encoder
}

// openWatch opens the watch the request asks for and writes the response headers. It returns
// nil when it answered the request itself: an error, or a resourceVersion the history no longer
// reaches (a stream of one ERROR event).
func (h *handler) openWatch(rq *reqScope, opts store.ListOptions) *watchStream {
	sv := getServing()
	codecs := rq.codecs()
	mt, info, err := negotiation.NegotiateOutputMediaType(rq.r, codecs, restrictions{transforms: true})
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return nil
	}
	if info.StreamSerializer == nil || info.StreamSerializer.Framer == nil {
		_, streaming := negotiation.MediaTypesForSerializer(codecs)
		h.writeError(rq.w, rq.r, negotiation.NewNotAcceptableError(streaming))
		return nil
	}
	flusher, ok := rq.w.(http.Flusher)
	if !ok {
		h.writeError(rq.w, rq.r, apierrors.NewInternalError(fmt.Errorf("unable to start watch: response writer cannot flush")))
		return nil
	}
	gv := rq.gvr.GroupVersion()
	s := &watchStream{h: h, rq: rq, eventEnc: codecs.EncoderForVersion(info.StreamSerializer.Serializer, gv)}
	s.statusEnc = codecs.EncoderForVersion(info.Serializer, gv)
	s.objEnc = s.statusEnc // unless the client asked for a conversion (below)
	if mt.Convert != nil {
		metaInfo, ok := runtime.SerializerInfoForMediaType(sv.meta.SupportedMediaTypes(), info.MediaType)
		if !ok {
			h.writeError(rq.w, rq.r, negotiation.NewNotAcceptableError([]string{runtime.ContentTypeJSON}))
			return nil
		}
		s.objEnc = sv.meta.EncoderForVersion(metaInfo.Serializer, mt.Convert.GroupVersion())
		if mt.Convert.Kind == "Table" {
			if s.tableOpts, err = tableOptions(rq.r); err != nil {
				h.writeError(rq.w, rq.r, err)
				return nil
			}
		} else if mt.Convert.Kind != "PartialObjectMetadata" {
			h.writeError(rq.w, rq.r, negotiation.NewNotAcceptableConversionError(mt.Convert.Kind, []string{"PartialObjectMetadata", "Table"}))
			return nil
		}
		s.convert = mt.Convert
	}

	watcher, err := h.c.Watch(rq.gvr, rq.ns, opts)
	// A resourceVersion the history no longer reaches (410), or a state the cluster did not reach
	// in time (504), is answered as the watch cache answers it: a 200 stream with one ERROR event.
	var expired apierrors.APIStatus
	if err != nil && !((apierrors.IsResourceExpired(err) || apistorage.IsTooLargeResourceVersion(err)) && errors.As(err, &expired)) {
		h.writeError(rq.w, rq.r, err)
		return nil
	}

	contentType := info.MediaType
	if contentType != runtime.ContentTypeJSON {
		contentType += ";stream=watch"
	}
	rq.w.Header().Set("Content-Type", contentType)
	rq.w.Header().Set("Transfer-Encoding", "chunked")
	rq.w.WriteHeader(http.StatusOK)
	flusher.Flush()

	s.framer = info.StreamSerializer.Framer.NewFrameWriter(rq.w)
	s.events = eventWriter{rc: http.NewResponseController(rq.w)}
	s.events.limit, _ = rq.r.Context().Value(watchWriteLimitKey{}).(WatchWriteLimit)
	if expired != nil {
		if watcher != nil {
			watcher.Stop()
		}
		// Reflectors relist on the 410 and retry on the 504.
		status := expired.Status()
		h.writeEvent(s.framer, watch.Error, &status, s.statusEnc, s.eventEnc)
		flusher.Flush()
		return nil
	}

	timeout := minWatchTimeout + time.Duration(rand.Int64N(int64(minWatchTimeout)))
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	s.watcher = watcher
	s.ctx, s.cancel = context.WithTimeout(rq.r.Context(), timeout)
	return s
}

// run streams the watch's events until it ends: stopped, timed out, the client went away, a
// write took too long, or the watch ended in the store.
func (s *watchStream) run() {
	defer s.cancel()
	defer s.watcher.Stop()
	for {
		// This goroutine reads the store's watcher itself: a watch costs no store goroutine.
		ev, ok := s.watcher.Next(s.ctx.Done())
		if !ok || !s.write(ev) {
			return
		}
	}
}

// write writes and flushes one event, reporting whether the watch goes on.
func (s *watchStream) write(ev watch.Event) bool {
	obj := ev.Object
	if s.convert != nil && ev.Type != watch.Error {
		var err error
		if obj, err = s.h.transformWatched(s.rq, obj, *s.convert, s.tableOpts); err != nil {
			s.h.log.Error(err, "Cannot transform watch event")
			return false
		}
		if s.tableOpts != nil {
			s.tableOpts.NoHeaders = true // columns only in the first event, like upstream
		}
	}
	enc := s.objEnc
	if _, isStatus := obj.(*metav1.Status); isStatus {
		enc = s.statusEnc
	}
	deadline := s.events.start()
	ok := s.h.writeEvent(s.framer, ev.Type, obj, enc, s.eventEnc) && s.events.rc.Flush() == nil
	return s.events.done(deadline, ok)
}

// watchBuffers holds the encode buffers of all watches: a watch takes two per event and gives
// them back once the event is written, so an idle watch keeps none however large its last
// event was. Buffers grown past maxPooledWatchBuffer are left to the garbage collector.
var watchBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledWatchBuffer = 64 << 10

func getWatchBuffer() *bytes.Buffer { return watchBuffers.Get().(*bytes.Buffer) }

func putWatchBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooledWatchBuffer {
		return
	}
	b.Reset()
	watchBuffers.Put(b)
}

// writeEvent encodes one watch event (the object with enc, wrapped in a WatchEvent with
// eventEnc) and writes it as one frame. It reports false when the watch must end.
func (h *handler) writeEvent(framer io.Writer, typ watch.EventType, obj runtime.Object, enc, eventEnc runtime.Encoder) bool {
	objBuf := getWatchBuffer()
	defer putWatchBuffer(objBuf)
	if err := enc.Encode(obj, objBuf); err != nil {
		h.log.Error(err, "Cannot encode watch event object")
		return false
	}
	eventBuf := getWatchBuffer()
	defer putWatchBuffer(eventBuf)
	out := &metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: objBuf.Bytes()}}
	if err := eventEnc.Encode(out, eventBuf); err != nil {
		h.log.Error(err, "Cannot encode watch event")
		return false
	}
	_, err := framer.Write(eventBuf.Bytes())
	return err == nil // else the client went away
}

func (h *handler) transformWatched(rq *reqScope, obj runtime.Object, target schema.GroupVersionKind, tableOpts *metav1.TableOptions) (runtime.Object, error) {
	gv := target.GroupVersion()
	if target.Kind == "Table" {
		return toTable(rq, obj, tableOpts, gv, tableOpts.NoHeaders)
	}
	return partialMetadata(obj, gv)
}
