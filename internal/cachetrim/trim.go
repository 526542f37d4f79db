package cachetrim

import (
	"bytes"
	"errors"
	"slices"
)

// Trim says which members of a JSON object to leave out.
type Trim struct {
	Drop   []string        // members left out
	Only   []string        // when set, every member not named here is left out
	Within map[string]Trim // members whose values are objects, trimmed in turn
	Each   map[string]Trim // members whose values are arrays of objects, each trimmed in turn
}

// keeps reports whether the member named key stays.
func (t *Trim) keeps(key []byte) bool {
	name := string(key) // no allocation: the conversion is only compared
	if slices.Contains(t.Drop, name) {
		return false
	}
	return t.Only == nil || slices.Contains(t.Only, name)
}

var errMalformed = errors.New("malformed JSON")

// trimObject appends to dst the object that starts at src[i] (after any white space) without
// the members t leaves out, and returns the index after it. Kept members are copied as they
// are; the white space between members is not. A member whose name has an escape sequence is
// kept: it is compared as written. src must be one well-formed value; what is not is reported
// as errMalformed, with dst then undefined.
func trimObject(dst, src []byte, i int, t *Trim) ([]byte, int, error) {
	i = skipSpace(src, i)
	if i >= len(src) || src[i] != '{' {
		return dst, 0, errMalformed
	}
	dst = append(dst, '{')
	i++
	first := true
	for {
		i = skipSpace(src, i)
		if i >= len(src) {
			return dst, 0, errMalformed
		}
		if src[i] == '}' {
			if !first {
				return dst, 0, errMalformed // a comma before the brace
			}
			return append(dst, '}'), i + 1, nil
		}
		keyStart := i
		keyEnd, err := stringEnd(src, i)
		if err != nil {
			return dst, 0, err
		}
		i = skipSpace(src, keyEnd)
		if i >= len(src) || src[i] != ':' {
			return dst, 0, errMalformed
		}
		valueStart := skipSpace(src, i+1)
		key := src[keyStart+1 : keyEnd-1]
		keep := bytes.IndexByte(key, '\\') >= 0 || t.keeps(key)
		var within, each *Trim
		if keep && valueStart < len(src) {
			if w, ok := t.Within[string(key)]; ok && src[valueStart] == '{' {
				within = &w
			} else if e, ok := t.Each[string(key)]; ok && src[valueStart] == '[' {
				each = &e
			}
		}
		var valueEnd int
		switch {
		case within != nil:
			dst = appendMember(dst, src[keyStart:keyEnd], first)
			if dst, valueEnd, err = trimObject(dst, src, valueStart, within); err != nil {
				return dst, 0, err
			}
			first = false
		case each != nil:
			dst = appendMember(dst, src[keyStart:keyEnd], first)
			if dst, valueEnd, err = trimArray(dst, src, valueStart, each); err != nil {
				return dst, 0, err
			}
			first = false
		case keep:
			if valueEnd, err = valueEndAt(src, valueStart); err != nil {
				return dst, 0, err
			}
			dst = appendMember(dst, src[keyStart:keyEnd], first)
			dst = append(dst, src[valueStart:valueEnd]...)
			first = false
		default:
			if valueEnd, err = valueEndAt(src, valueStart); err != nil {
				return dst, 0, err
			}
		}
		i = skipSpace(src, valueEnd)
		if i >= len(src) {
			return dst, 0, errMalformed
		}
		switch src[i] {
		case ',':
			i++
			i = skipSpace(src, i)
			if i < len(src) && src[i] == '}' {
				return dst, 0, errMalformed // a trailing comma
			}
		case '}':
			return append(dst, '}'), i + 1, nil
		default:
			return dst, 0, errMalformed
		}
	}
}

// trimArray appends to dst the array that starts at src[i] with each of its objects trimmed by
// t, and returns the index after it. Elements that are not objects are copied.
func trimArray(dst, src []byte, i int, t *Trim) ([]byte, int, error) {
	dst = append(dst, '[')
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == ']' {
		return append(dst, ']'), i + 1, nil
	}
	for {
		var err error
		if i < len(src) && src[i] == '{' {
			if dst, i, err = trimObject(dst, src, i, t); err != nil {
				return dst, 0, err
			}
		} else {
			end, err := valueEndAt(src, i)
			if err != nil {
				return dst, 0, err
			}
			dst = append(dst, src[i:end]...)
			i = end
		}
		i = skipSpace(src, i)
		if i >= len(src) {
			return dst, 0, errMalformed
		}
		switch src[i] {
		case ',':
			dst = append(dst, ',')
			i = skipSpace(src, i+1)
		case ']':
			return append(dst, ']'), i + 1, nil
		default:
			return dst, 0, errMalformed
		}
	}
}

func appendMember(dst, key []byte, first bool) []byte {
	if !first {
		dst = append(dst, ',')
	}
	dst = append(dst, key...)
	return append(dst, ':')
}

func skipSpace(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index after the string that starts at src[i].
func stringEnd(src []byte, i int) (int, error) {
	if i >= len(src) || src[i] != '"' {
		return 0, errMalformed
	}
	for i++; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++ // the escaped byte; \uXXXX's digits need no care
		case '"':
			return i + 1, nil
		}
	}
	return 0, errMalformed
}

// valueEndAt returns the index after the value that starts at src[i]: a string, an object or
// array (brackets counted outside strings; their contents are not validated: the decoder
// after this package does that), or a literal or number (up to the next delimiter).
func valueEndAt(src []byte, i int) (int, error) {
	if i >= len(src) {
		return 0, errMalformed
	}
	switch src[i] {
	case '"':
		return stringEnd(src, i)
	case '{', '[':
		var s valueScanner
		n, done := s.scan(src[i:])
		if !done {
			return 0, errMalformed
		}
		return i + n, nil
	case ',', '}', ']', ':':
		return 0, errMalformed
	}
	start := i
	for i < len(src) {
		switch src[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i, nil
		}
		i++
	}
	if i == start {
		return 0, errMalformed
	}
	return i, nil
}

// valueScanner finds where an object or array ends, over input given in pieces.
type valueScanner struct {
	depth    int
	inString bool
	escaped  bool
}

// scan reads p, which continues what earlier calls read, and returns how many of its bytes
// belong to the value and whether the value ended within them. The first byte of the value
// must be '{' or '['.
func (s *valueScanner) scan(p []byte) (int, bool) {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if s.inString {
			switch {
			case s.escaped:
				s.escaped = false
			case c == '\\':
				s.escaped = true
			case c == '"':
				s.inString = false
			}
			continue
		}
		switch c {
		case '"':
			s.inString = true
		case '{', '[':
			s.depth++
		case '}', ']':
			s.depth--
			if s.depth == 0 {
				return i + 1, true
			}
		}
	}
	return len(p), false
}
