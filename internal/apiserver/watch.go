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

// serveWatch streams watch events: newline-delimited WatchEvents in JSON, length-prefixed
// frames in protobuf, each flushed as soon as it is written.
func (h *handler) serveWatch(rq *reqScope, opts store.ListOptions) {
	sv := getServing()
	codecs := rq.codecs()
	mt, info, err := negotiation.NegotiateOutputMediaType(rq.r, codecs, restrictions{transforms: true})
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if info.StreamSerializer == nil || info.StreamSerializer.Framer == nil {
		_, streaming := negotiation.MediaTypesForSerializer(codecs)
		h.writeError(rq.w, rq.r, negotiation.NewNotAcceptableError(streaming))
		return
	}
	flusher, ok := rq.w.(http.Flusher)
	if !ok {
		h.writeError(rq.w, rq.r, apierrors.NewInternalError(fmt.Errorf("unable to start watch: response writer cannot flush")))
		return
	}
	gv := rq.gvr.GroupVersion()
	eventEnc := codecs.EncoderForVersion(info.StreamSerializer.Serializer, gv)
	objEnc := codecs.EncoderForVersion(info.Serializer, gv)
	var tableOpts *metav1.TableOptions
	if mt.Convert != nil {
		metaInfo, ok := runtime.SerializerInfoForMediaType(sv.meta.SupportedMediaTypes(), info.MediaType)
		if !ok {
			h.writeError(rq.w, rq.r, negotiation.NewNotAcceptableError([]string{runtime.ContentTypeJSON}))
			return
		}
		objEnc = sv.meta.EncoderForVersion(metaInfo.Serializer, mt.Convert.GroupVersion())
		if mt.Convert.Kind == "Table" {
			if tableOpts, err = tableOptions(rq.r); err != nil {
				h.writeError(rq.w, rq.r, err)
				return
			}
		} else if mt.Convert.Kind != "PartialObjectMetadata" {
			h.writeError(rq.w, rq.r, negotiation.NewNotAcceptableConversionError(mt.Convert.Kind, []string{"PartialObjectMetadata", "Table"}))
			return
		}
	}

	watcher, err := h.c.Watch(rq.gvr, rq.ns, opts)
	// A resourceVersion the history no longer reaches (410), or a state the cluster did not reach
	// in time (504), is answered as the watch cache answers it: a 200 stream with one ERROR event.
	var expired apierrors.APIStatus
	if err != nil && !((apierrors.IsResourceExpired(err) || apistorage.IsTooLargeResourceVersion(err)) && errors.As(err, &expired)) {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if watcher != nil {
		defer watcher.Stop()
	}

	timeout := minWatchTimeout + time.Duration(rand.Int64N(int64(minWatchTimeout)))
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(rq.r.Context(), timeout)
	defer cancel()

	contentType := info.MediaType
	if contentType != runtime.ContentTypeJSON {
		contentType += ";stream=watch"
	}
	rq.w.Header().Set("Content-Type", contentType)
	rq.w.Header().Set("Transfer-Encoding", "chunked")
	rq.w.WriteHeader(http.StatusOK)
	flusher.Flush()

	framer := info.StreamSerializer.Framer.NewFrameWriter(rq.w)
	events := &eventWriter{rc: http.NewResponseController(rq.w)}
	events.limit, _ = rq.r.Context().Value(watchWriteLimitKey{}).(WatchWriteLimit)
	if expired != nil {
		// Reflectors relist on the 410 and retry on the 504.
		status := expired.Status()
		h.writeEvent(framer, watch.Error, &status, codecs.EncoderForVersion(info.Serializer, gv), eventEnc)
		flusher.Flush()
		return
	}
	for {
		// This goroutine reads the store's watcher itself: a watch costs no store goroutine.
		ev, ok := watcher.Next(ctx.Done())
		if !ok {
			return // stopped, timed out, the client went away, or the watch ended in the store
		}
		obj := ev.Object
		if mt.Convert != nil && ev.Type != watch.Error {
			if obj, err = h.transformWatched(rq, obj, *mt.Convert, tableOpts); err != nil {
				h.log.Error(err, "Cannot transform watch event")
				return
			}
			if tableOpts != nil {
				tableOpts.NoHeaders = true // columns only in the first event, like upstream
			}
		}
		enc := objEnc
		if _, isStatus := obj.(*metav1.Status); isStatus {
			enc = codecs.EncoderForVersion(info.Serializer, gv)
		}
		deadline := events.start()
		ok = h.writeEvent(framer, ev.Type, obj, enc, eventEnc) && events.rc.Flush() == nil
		if !events.done(deadline, ok) {
			return
		}
	}
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
