package portforward

import (
	"io"
	"sync"
)

// copyBufferSize is io.Copy's own buffer size.
const copyBufferSize = 32 << 10

// copyBuffers are the buffers of forwardCopy. Every forwarded connection copies in both
// directions; KCP opens one per etcd health check, and allocating two fresh 32 KiB buffers each
// time was 3% of the manager's allocations at scale.
var copyBuffers = sync.Pool{New: func() any {
	b := make([]byte, copyBufferSize)
	return &b
}}

// forwardCopy is io.Copy with a pooled buffer.
func forwardCopy(dst io.Writer, src io.Reader) (int64, error) {
	b := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(b)
	return io.CopyBuffer(dst, src, *b)
}

// webSocketWriteBuffers lets tunnelled connections share write buffers between writes instead of
// holding 32 KiB each for their lifetime (gorilla/websocket's Upgrader.WriteBufferPool).
var webSocketWriteBuffers = &sync.Pool{}
