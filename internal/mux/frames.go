package mux

import "net/http"

// maxDataFrame is the largest piece of a response body handed to the HTTP/2 server at once.
//
// The server writes each piece as DATA frames up to the client's maximum frame size (16 KiB for
// client-go and grpc-go) through a buffer every connection keeps, for its whole life, at the size
// of the largest frame it wrote: a connection that once answered a LIST kept 16 KiB, for every
// open connection of every cluster (three per cluster through CAPI). Pieces of 4 KiB, the size
// the server itself hands buffered writes on in, keep that buffer at 4 KiB; a larger body costs
// one more hand-off to the connection's goroutine per 4 KiB.
const maxDataFrame = 4 << 10

// noHeaderTable is the size of the HPACK table the server compresses response headers with
// (http.HTTP2Config.MaxEncoderHeaderTableSize; 0 would mean the default 4 KiB): too small for any
// entry, so no connection keeps one. With a table, each connection filled it with every Date it
// answered (a new value each second) up to 4 KiB of entries, plus the two maps indexing them; on
// loopback the bytes indexing saves do not matter. The table requests' headers are decoded with
// stays at its default: a smaller one only applies once the client has read the server's
// settings, and client-go may send several requests before that.
const noHeaderTable = 1

// smallFrames is w for an HTTP/2 request, with its body written in pieces of maxDataFrame.
func smallFrames(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	if r.ProtoMajor != 2 {
		return w
	}
	return &smallFramesWriter{w}
}

type smallFramesWriter struct {
	http.ResponseWriter
}

func (s *smallFramesWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n, err := s.ResponseWriter.Write(p[:min(len(p), maxDataFrame)])
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// Flush keeps watches and gRPC streams working: both assert http.Flusher.
func (s *smallFramesWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the server's writer (deadlines).
func (s *smallFramesWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
