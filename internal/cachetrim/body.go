package cachetrim

import (
	"bufio"
	"bytes"
	"io"
)

// eventTrimmer is a watch response's body: a stream of JSON watch events, each trimmed as it
// arrives and handed on whole, so that nothing waits on the next event. An event of type
// ERROR (a Status), or one that is not well-formed, passes unchanged; so does everything after
// a byte that cannot start an event.
type eventTrimmer struct {
	body        io.ReadCloser
	in          *bufio.Reader
	trim        Trim
	event, buf  []byte
	out         []byte // what Read has yet to return
	err         error  // returned once out is empty
	passThrough bool
}

func newEventTrimmer(body io.ReadCloser, trim Trim) *eventTrimmer {
	return &eventTrimmer{body: body, in: bufio.NewReaderSize(body, 32<<10), trim: trim}
}

func (e *eventTrimmer) Read(p []byte) (int, error) {
	for len(e.out) == 0 {
		switch {
		case e.err != nil:
			return 0, e.err
		case e.passThrough:
			return e.in.Read(p)
		}
		e.next()
	}
	n := copy(p, e.out)
	e.out = e.out[n:]
	return n, nil
}

func (e *eventTrimmer) Close() error { return e.body.Close() }

// next reads the next event into out, or sets err, or switches to passing through.
func (e *eventTrimmer) next() {
	for {
		c, err := e.in.ReadByte()
		if err != nil {
			e.err = err
			return
		}
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			continue
		}
		if err := e.in.UnreadByte(); err != nil {
			e.err = err
			return
		}
		if c != '{' {
			e.passThrough = true
			return
		}
		break
	}
	e.event = e.event[:0]
	var s valueScanner
	for {
		chunk, err := e.in.Peek(1) // fills the buffer when it is empty
		if len(chunk) == 0 {
			e.out, e.err = e.event, err // a cut stream: the decoder reports it after the part read
			return
		}
		chunk, _ = e.in.Peek(e.in.Buffered())
		n, done := s.scan(chunk)
		e.event = append(e.event, chunk[:n]...)
		_, _ = e.in.Discard(n)
		if done {
			break
		}
	}
	if isErrorEvent(e.event) {
		e.out = e.event
		return
	}
	trimmed, _, err := trimObject(e.buf[:0], e.event, 0, &e.trim)
	if err != nil {
		e.out = e.event
		return
	}
	e.buf = append(trimmed, '\n')
	e.out = e.buf
}

// isErrorEvent reports whether a watch event's type is ERROR: its object is a Status, whose
// members are not an object's.
func isErrorEvent(event []byte) bool {
	v, ok := memberValue(event, "type")
	return ok && bytes.Equal(v, []byte(`"ERROR"`))
}

// memberValue returns the value of the top-level member called name of the object src.
func memberValue(src []byte, name string) ([]byte, bool) {
	i := skipSpace(src, 0)
	if i >= len(src) || src[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(src, i)
		keyEnd, err := stringEnd(src, i)
		if err != nil {
			return nil, false
		}
		key := src[i+1 : keyEnd-1]
		i = skipSpace(src, keyEnd)
		if i >= len(src) || src[i] != ':' {
			return nil, false
		}
		start := skipSpace(src, i+1)
		end, err := valueEndAt(src, start)
		if err != nil {
			return nil, false
		}
		if string(key) == name {
			return src[start:end], true
		}
		i = skipSpace(src, end)
		if i >= len(src) || src[i] != ',' {
			return nil, false
		}
		i++
	}
}

// listTrimmer is a list response's body: read whole on the first Read (as the client does
// anyway), trimmed, then returned; a body that is not a well-formed object passes unchanged.
type listTrimmer struct {
	body io.ReadCloser
	trim Trim
	out  *bytes.Reader
	err  error
}

func newListTrimmer(body io.ReadCloser, trim Trim) *listTrimmer {
	return &listTrimmer{body: body, trim: trim}
}

func (l *listTrimmer) Read(p []byte) (int, error) {
	if l.out == nil {
		l.fill()
	}
	n, err := l.out.Read(p)
	if err == io.EOF && l.err != nil {
		err = l.err
	}
	return n, err
}

func (l *listTrimmer) fill() {
	list, err := io.ReadAll(l.body)
	if err != nil { // the part read, then the error
		l.out, l.err = bytes.NewReader(list), err
		return
	}
	trimmed, end, err := trimObject(make([]byte, 0, len(list)/2), list, 0, &l.trim)
	if err != nil || skipSpace(list, end) != len(list) {
		l.out = bytes.NewReader(list)
		return
	}
	l.out = bytes.NewReader(trimmed)
}

func (l *listTrimmer) Close() error { return l.body.Close() }
