package setters

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Named is a value a file holds at a JSON Pointer (RFC 6901), set as if
// Marker marked it: how a file that cannot carry a marker (JSON has no
// comments) is updated, from an automation's update.files.
type Named struct {
	Pointer string
	Marker  Marker
}

// NamedFiles are the Named values of update.files by file, relative to
// dir; an entry whose policy is not a marker value, or a value named twice,
// is an error.
func NamedFiles(files []meta.FileUpdate) (map[string][]Named, error) {
	out := map[string][]Named{}
	seen := map[[2]string]bool{}
	for i, f := range files {
		if seen[[2]string{f.Path, f.Pointer}] {
			return nil, fmt.Errorf("update.files[%d]: %s %s is named twice", i, f.Path, f.Pointer)
		}
		seen[[2]string{f.Path, f.Pointer}] = true
		m, ok := ParseMarkerValue(f.Policy)
		if !ok {
			return nil, fmt.Errorf("update.files[%d].policy %q is not NAMESPACE:NAME[:tag|:name|:digest]", i, f.Policy)
		}
		if !strings.HasPrefix(f.Pointer, "/") {
			return nil, fmt.Errorf("update.files[%d].pointer %q is not a JSON Pointer: it starts with /", i, f.Pointer)
		}
		out[f.Path] = append(out[f.Path], Named{Pointer: f.Pointer, Marker: m})
	}
	return out, nil
}

// namedFormat is the format of a JSON file whose named values are set.
func namedFormat(named []Named) *Format {
	return &Format{Kind: "JSON", Targets: func(data []byte) ([]Target, []error, error) { return jsonTargets(data, named) }}
}

// jsonTargets finds the named values in a JSON document by walking its
// tokens with encoding/json's decoder, which says where each ends; a value
// is a string without escapes, whose bytes are its value.
func jsonTargets(data []byte, named []Named) ([]Target, []error, error) {
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, nil, fmt.Errorf("line %d: %v", bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))+1, err)
		}
		return nil, nil, err
	}
	want := map[string][]Marker{}
	for _, n := range named {
		want[n.Pointer] = append(want[n.Pointer], n.Marker)
	}
	w := jsonWalk{data: data, dec: json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(data, utf8BOM))), want: want, found: map[string]bool{}}
	if bytes.HasPrefix(data, utf8BOM) {
		w.base = len(utf8BOM)
	}
	w.dec.UseNumber()
	if err := w.value(""); err != nil {
		return nil, nil, err
	}
	for _, n := range named {
		if !w.found[n.Pointer] {
			w.skipped = append(w.skipped, fmt.Errorf("%s: the document has no value there to set for %s", n.Pointer, n.Marker))
			w.found[n.Pointer] = true
		}
	}
	sort.Slice(w.targets, func(i, j int) bool { return w.targets[i].Start < w.targets[j].Start })
	return w.targets, w.skipped, nil
}

type jsonWalk struct {
	data    []byte
	base    int // a BOM the decoder did not see
	dec     *json.Decoder
	want    map[string][]Marker
	found   map[string]bool
	targets []Target
	skipped []error
	// each, when set, is told of every plain string (no escapes) and its
	// bytes: what discovery reads (jsonValues).
	each func(ptr string, start, end int)
}

// value reads the value at pointer ptr, and what it holds.
func (w *jsonWalk) value(ptr string) error {
	before := w.base + int(w.dec.InputOffset())
	tok, err := w.dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil
		}
		return err
	}
	markers := w.want[ptr]
	switch t := tok.(type) {
	case json.Delim:
		if len(markers) > 0 {
			w.found[ptr] = true
			w.skipped = append(w.skipped, fmt.Errorf("%s: the value there is an object or array, not a string", ptr))
		}
		if t == '{' {
			for w.dec.More() {
				key, err := w.dec.Token()
				if err != nil {
					return err
				}
				if err := w.value(ptr + "/" + escapePointer(key.(string))); err != nil {
					return err
				}
			}
		} else if t == '[' {
			for i := 0; w.dec.More(); i++ {
				if err := w.value(ptr + "/" + strconv.Itoa(i)); err != nil {
					return err
				}
			}
		}
		_, err := w.dec.Token() // the closing delimiter
		return err
	case string:
		if w.each != nil {
			end := w.base + int(w.dec.InputOffset())
			start := bytes.IndexByte(w.data[before:end], '"') + before
			if raw := w.data[start+1 : end-1]; bytes.IndexByte(raw, '\\') < 0 && string(raw) == t {
				w.each(ptr, start+1, end-1)
			}
		}
		if len(markers) == 0 {
			return nil
		}
		w.found[ptr] = true
		end := w.base + int(w.dec.InputOffset())
		start := bytes.IndexByte(w.data[before:end], '"') + before
		raw := w.data[start+1 : end-1]
		if bytes.IndexByte(raw, '\\') >= 0 || string(raw) != t {
			w.skipped = append(w.skipped, fmt.Errorf("%s: the string there has escapes", ptr))
			return nil
		}
		line := bytes.Count(w.data[:start], []byte("\n")) + 1
		for _, m := range markers {
			w.targets = append(w.targets, Target{Start: start + 1, End: end - 1, Line: line, Marker: m})
		}
	default:
		if len(markers) > 0 {
			w.found[ptr] = true
			w.skipped = append(w.skipped, fmt.Errorf("%s: the value there is not a string", ptr))
		}
	}
	return nil
}

// escapePointer escapes a key as a JSON Pointer's reference token.
func escapePointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// NamedMarkers are the named values of a JSON file's bytes as markers
// would be found: with their lines and values, without a path.
func NamedMarkers(data []byte, named []Named) ([]MarkerSite, error) {
	_, _, _, markers, err := updateFormat(namedFormat(named), data, nil, nil)
	return markers, err
}

// JSONFormat is discovery's view of JSON files (*.json: ECS task
// definitions, devcontainer.json): their plain strings by JSON Pointer,
// set without a marker. JSON has no comments, so it carries no markers:
// a value to keep updated is named in the automation (update.files),
// which namedFormat sets.
var JSONFormat = Format{Kind: "JSON", Matches: func(name string) bool { return path.Ext(name) == ".json" },
	Targets:   func(data []byte) ([]Target, []error, error) { return jsonTargets(data, nil) },
	Values:    jsonValues,
	Sites:     valueSites(jsonValues, false, "value"),
	NoMarkers: "JSON has no comments to carry a marker: name the value in the automation's update.files (path, pointer, policy), or tk-image update --json FILE#POINTER=POLICY",
}

// jsonValues are a JSON document's plain strings, keyed by the last
// reference token of their JSON Pointer, which is their Path.
func jsonValues(data []byte) ([]Value, error) {
	if _, _, err := jsonTargets(data, nil); err != nil {
		return nil, err
	}
	lines := lineStarts(data)
	var out []Value
	w := jsonWalk{data: data, dec: json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(data, utf8BOM))), want: map[string][]Marker{}, found: map[string]bool{},
		each: func(ptr string, start, end int) {
			key := ptr[strings.LastIndexByte(ptr, '/')+1:]
			key = strings.ReplaceAll(strings.ReplaceAll(key, "~1", "/"), "~0", "~")
			line, col := position(lines, start)
			out = append(out, Value{Key: key, Path: ptr, Line: line, Column: col, Start: start, End: end})
		}}
	if bytes.HasPrefix(data, utf8BOM) {
		w.base = len(utf8BOM)
	}
	w.dec.UseNumber()
	if err := w.value(""); err != nil {
		return nil, err
	}
	return out, nil
}
