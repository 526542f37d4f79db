package cachetrim

import (
	"bytes"
	"errors"
	"slices"
)

// Trim says which members of a JSON object to leave out.
type Trim struct {
	Drop   []string             // members left out
	Only   []string             // when set, every member not named here is left out
	Within map[string]Trim      // members whose values are objects, trimmed in turn
	Each   map[string]Trim      // members whose values are arrays of objects, each trimmed in turn
	Select map[string]Selection // members whose values are arrays of objects, only some kept
}

// Selection keeps, of an array, the objects whose string member Member is one of Values, as
// they are. Whatever else the array holds (objects without that member, or with another kind
// of value there or one written with an escape, and elements that are not objects) is kept
// too: the trim only leaves out what it can tell apart for certain.
type Selection struct {
	Member string
	Values []string
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
		var (
			within, each *Trim
			selection    *Selection
		)
		if keep && valueStart < len(src) {
			if w, ok := t.Within[string(key)]; ok && src[valueStart] == '{' {
				within = &w
			} else if e, ok := t.Each[string(key)]; ok && src[valueStart] == '[' {
				each = &e
			} else if sel, ok := t.Select[string(key)]; ok && src[valueStart] == '[' {
				selection = &sel
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
		case selection != nil:
			dst = appendMember(dst, src[keyStart:keyEnd], first)
			if dst, valueEnd, err = selectArray(dst, src, valueStart, selection); err != nil {
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
	first := true
	end, err := forEachElement(src, i, func(start int) (int, error) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if src[start] == '{' {
			var end int
			var err error
			dst, end, err = trimObject(dst, src, start, t)
			return end, err
		}
		end, err := valueEndAt(src, start)
		if err == nil {
			dst = append(dst, src[start:end]...)
		}
		return end, err
	})
	return append(dst, ']'), end, err
}

// selectArray appends to dst the array that starts at src[i] with only the elements sel keeps,
// and returns the index after it.
func selectArray(dst, src []byte, i int, sel *Selection) ([]byte, int, error) {
	dst = append(dst, '[')
	first := true
	end, err := forEachElement(src, i, func(start int) (int, error) {
		end, err := valueEndAt(src, start)
		if err == nil && sel.keeps(src[start:end]) {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, src[start:end]...)
		}
		return end, err
	})
	return append(dst, ']'), end, err
}

// forEachElement calls element with the start of each element of the array that starts at
// src[i]; element returns the index after it. It returns the index after the array.
func forEachElement(src []byte, i int, element func(start int) (int, error)) (int, error) {
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == ']' {
		return i + 1, nil
	}
	for {
		if i >= len(src) {
			return 0, errMalformed
		}
		end, err := element(i)
		if err != nil {
			return 0, err
		}
		i = skipSpace(src, end)
		if i >= len(src) {
			return 0, errMalformed
		}
		switch src[i] {
		case ',':
			i = skipSpace(src, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, errMalformed
		}
	}
}

// keeps reports whether sel keeps the array element elem, one complete value. Like the decoder,
// it goes by the member's last occurrence; a member name with an escape keeps the element (it
// may name Member).
func (sel *Selection) keeps(elem []byte) bool {
	if elem[0] != '{' {
		return true
	}
	keep := true // no such member
	i := skipSpace(elem, 1)
	for i < len(elem) && elem[i] == '"' {
		keyEnd, err := stringEnd(elem, i)
		if err != nil {
			return true
		}
		key := elem[i+1 : keyEnd-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return true
		}
		i = skipSpace(elem, keyEnd)
		if i >= len(elem) || elem[i] != ':' {
			return true
		}
		valueStart := skipSpace(elem, i+1)
		valueEnd, err := valueEndAt(elem, valueStart)
		if err != nil {
			return true
		}
		if string(key) == sel.Member {
			value := elem[valueStart:valueEnd]
			// Not a string, or one with an escape: not compared.
			keep = len(value) < 2 || value[0] != '"' || bytes.IndexByte(value, '\\') >= 0 ||
				slices.Contains(sel.Values, string(value[1:len(value)-1]))
		}
		i = skipSpace(elem, valueEnd)
		if i < len(elem) && elem[i] == ',' {
			i = skipSpace(elem, i+1)
		}
	}
	return keep
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
