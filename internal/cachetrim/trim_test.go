package cachetrim

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
)

var (
	managedFields = Trim{Within: map[string]Trim{"metadata": {Drop: []string{"managedFields"}}}}
	machineTrim   = Trim{Drop: []string{"status"}, Within: managedFields.Within}
	clusterTrim   = Trim{Within: map[string]Trim{
		"metadata": managedFields.Within["metadata"],
		"status": {
			Only:   []string{"initialization", "conditions"},
			Select: map[string]Selection{"conditions": {Member: "type", Values: []string{"ControlPlaneInitialized"}}},
		},
	}}
)

// expected applies t to v (decoded JSON) as encoding/json sees the object: the reference the
// byte scanner must agree with.
func expected(v any, t Trim) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for k, val := range obj {
		if !t.keeps([]byte(k)) {
			continue
		}
		if w, ok := t.Within[k]; ok {
			val = expected(val, w)
		} else if e, ok := t.Each[k]; ok {
			if items, ok := val.([]any); ok {
				trimmed := make([]any, len(items))
				for i, item := range items {
					trimmed[i] = expected(item, e)
				}
				val = trimmed
			}
		} else if sel, ok := t.Select[k]; ok {
			if items, ok := val.([]any); ok {
				kept := []any{}
				for _, item := range items {
					if m, ok := item.(map[string]any); ok {
						if v, ok := m[sel.Member].(string); ok && !slices.Contains(sel.Values, v) {
							continue
						}
					}
					kept = append(kept, item)
				}
				val = kept
			}
		}
		out[k] = val
	}
	return out
}

func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return v
}

func checkTrim(t *testing.T, src []byte, trim Trim) []byte {
	t.Helper()
	got, end, err := trimObject(nil, src, 0, &trim)
	if err != nil {
		t.Fatalf("trimObject: %v\n%s", err, src)
	}
	if skipSpace(src, end) != len(src) {
		t.Fatalf("stopped at %d of %d", end, len(src))
	}
	if want := expected(decodeJSON(t, src), trim); !reflect.DeepEqual(decodeJSON(t, got), want) {
		t.Fatalf("trimmed\n%s\nto\n%s", src, got)
	}
	return got
}

// TestTrimLeavesOutWhatItNames: on objects CAPI and Goofy wrote, as served, and on the shapes
// a hand-written encoder may produce (white space anywhere, members in any order, the left-out
// member first, last or alone, empty objects and arrays, strings holding brackets, quotes and
// escapes), the trimmed JSON decodes to the original without the members the trim names.
func TestTrimLeavesOutWhatItNames(t *testing.T) {
	for _, tc := range []struct{ name, sample string }{
		{"machine", "machine"}, {"cluster", "cluster"}, {"goofymachine", "goofymachine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := sample(t, tc.sample)
			trim := map[string]Trim{"machine": machineTrim, "cluster": clusterTrim, "goofymachine": managedFields}[tc.name]
			got := checkTrim(t, src, trim)
			if bytes.Contains(got, []byte(`"managedFields"`)) {
				t.Error("managed fields kept")
			}
			if len(got) >= len(src)*3/4 {
				t.Errorf("trimmed %d of %d bytes only", len(src)-len(got), len(src))
			}
			// The same object indented: the scanner skips white space between tokens.
			var indented bytes.Buffer
			if err := json.Indent(&indented, src, " \t", "\r\n  "); err != nil {
				t.Fatal(err)
			}
			checkTrim(t, indented.Bytes(), trim)
		})
	}
	for _, src := range []string{
		`{}`,
		` { } `,
		`{"status":{"phase":"Running"}}`,
		`{"status":1,"spec":{"a":[1,2,{"b":"}"}]}}`,
		`{"spec":{"x":"\"status\":{"},"status":{"x":"{["}}`,
		`{"metadata":{"managedFields":[{"a":"]"}],"name":"n"},"status":null,"spec":[]}`,
		`{"metadata":{"name":"n","managedFields":[]},"status":{}}`,
		`{"metadata":{"managedFields":[]}}`,
		`{"metadata":"not an object","status":true}`,
		`{"kind":"X","spec":{"n":-1.5e+3,"t":true,"f":false,"z":null,"u":"\u00e9\\"}}`,
		`{"a":1,"status":2,"b":3,"status":4,"c":5}`,
	} {
		checkTrim(t, []byte(src), machineTrim)
		checkTrim(t, []byte(src), clusterTrim)
	}
	// Selected conditions: of the objects, those of another type go; what cannot be told apart
	// for certain stays (no type, a type that is not a string, elements that are not objects).
	for _, src := range []string{
		`{"status":{"conditions":[]}}`,
		`{"status":{"conditions":[{"type":"Available","status":"False"}]}}`,
		`{"status":{"conditions":[{"type":"Available"},{"type":"ControlPlaneInitialized","status":"True"},{"type":"Paused"}]}}`,
		`{"status":{"conditions":[ {"status":"x"} , {"type":1},"s",null,[{"type":"A"}],{"reason":"{[\"type\":\"A\""} ]}}`,
		`{"status":{"conditions":[{"type":"B","type":"ControlPlaneInitialized"},{"type":"ControlPlaneInitialized","type":"B"}]}}`,
		`{"status":{"conditions":[{"message":"]}","type":"A","x":{"type":"ControlPlaneInitialized"}}]},"spec":{"conditions":[{"type":"A"}]}}`,
	} {
		checkTrim(t, []byte(src), clusterTrim)
	}
	if got := checkTrim(t, sample(t, "cluster"), clusterTrim); bytes.Count(got, []byte(`"type":`)) != 1 ||
		!bytes.Contains(got, []byte(`"type":"ControlPlaneInitialized"`)) {
		t.Errorf("the cluster's conditions trimmed to %s", got)
	}
	// An escaped type, or a member name with an escape, is not compared: the element stays.
	for _, src := range []string{
		`{"status":{"conditions":[{"type":"\u0041"}]}}`,
		`{"status":{"conditions":[{"typ\u0065":"A"}]}}`,
		`{"status":{"conditions":[{"type":"A","typ\u0065":"B"}]}}`,
	} {
		if got, _, err := trimObject(nil, []byte(src), 0, &clusterTrim); err != nil || string(got) != src {
			t.Errorf("%s trimmed to %s (%v)", src, got, err)
		}
	}
	// A member whose name is escaped is compared as written, so kept (the cache's transform
	// still sees it).
	escaped := `{"stat\u0075s":{"kept":1}}`
	if got, _, err := trimObject(nil, []byte(escaped), 0, &machineTrim); err != nil || string(got) != escaped {
		t.Errorf("%s trimmed to %s (%v)", escaped, got, err)
	}
	// Lists: each item trimmed, whatever the item.
	list := `{"kind":"MachineList","metadata":{"resourceVersion":"7"},"items":[` +
		string(sample(t, "machine")) + `, {"status":{}} ,"x",[1],{}]}`
	checkTrim(t, []byte(list), Trim{Each: map[string]Trim{"items": machineTrim}})
	checkTrim(t, []byte(`{"items":[]}`), Trim{Each: map[string]Trim{"items": machineTrim}})
}

// TestTrimReportsMalformedJSON: what is not one well-formed object is reported, never read past
// its end: the caller then passes the bytes unchanged, for the decoder to reject.
func TestTrimReportsMalformedJSON(t *testing.T) {
	list := Trim{Each: map[string]Trim{"items": machineTrim}}
	for _, src := range []string{
		``, ` `, `[]`, `"s"`, `{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,}`, `{,}`, `{"a" 1}`,
		`{"a":}`, `{"a":1 "b":2}`, `{"status":{"x":1}`, `{"status":"unterminated}`,
		`{"status":{"conditions":[{"type":"A"}}}`, `{"status":{"conditions":[{"type":"A"`,
		`{a:1}`, `{"items":[`, `{"metadata":{"managedFields":[}`, `{"metadata":{"name":"x"`, `{"a":"\`,
	} {
		for _, trim := range []Trim{machineTrim, clusterTrim, list} {
			if _, _, err := trimObject(nil, []byte(src), 0, &trim); !errors.Is(err, errMalformed) {
				t.Errorf("%q: err %v, want errMalformed", src, err)
			}
		}
	}
	// An array is read element by element only where the trim looks into it.
	for _, src := range []string{`{"items":[1,]}`, `{"items":[1 2]}`, `{"items":[{}{}]}`} {
		if _, _, err := trimObject(nil, []byte(src), 0, &list); !errors.Is(err, errMalformed) {
			t.Errorf("%q: err %v, want errMalformed", src, err)
		}
	}
	for _, src := range []string{`{"status":{"conditions":[{"type":"A"},]}}`, `{"status":{"conditions":[{"type":"A"} {"type":"B"}]}}`,
		`{"status":{"conditions":[1,]}}`, `{"status":{"conditions":[,]}}`} {
		if _, _, err := trimObject(nil, []byte(src), 0, &clusterTrim); !errors.Is(err, errMalformed) {
			t.Errorf("%q: err %v, want errMalformed", src, err)
		}
	}
}

// FuzzTrimObject: no input panics or reads out of range; a well-formed object trims to
// well-formed JSON, and (when no member name is escaped) to what encoding/json's view of it
// minus the trimmed members is.
func FuzzTrimObject(f *testing.F) {
	for _, s := range []string{`{"status":{"a":[1,"]"]},"metadata":{"managedFields":[],"n":1}}`,
		`{"status":{"conditions":[{"type":"A"},{"type":"ControlPlaneInitialized"},{"x":"y"},3]}}`,
		`{"items":[{"status":1},2]}`, `{"a":"\"}"}`, `{"x":{"y":{"z":[[[]]]}}}`} {
		f.Add([]byte(s))
	}
	f.Add(sample(f, "cluster"))
	trims := []Trim{machineTrim, clusterTrim, {Each: map[string]Trim{"items": machineTrim}}}
	f.Fuzz(func(t *testing.T, src []byte) {
		for _, trim := range trims {
			got, end, err := trimObject(nil, src, 0, &trim)
			if err != nil || skipSpace(src, end) != len(src) || !json.Valid(src) {
				continue
			}
			if !json.Valid(got) {
				t.Fatalf("%s trimmed to %s", src, got)
			}
			if bytes.IndexByte(src, '\\') < 0 {
				var in, out any
				_ = json.Unmarshal(src, &in)
				_ = json.Unmarshal(got, &out)
				if !reflect.DeepEqual(out, expected(in, trim)) {
					t.Fatalf("%s trimmed to %s", src, got)
				}
			}
		}
	})
}
