package setters

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/kustomize/kyaml/yaml"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Policies maps NAMESPACE:NAME to the policy's image.
type Policies map[string]meta.ImageRef

// target is a scalar with a marker.
type target struct {
	node   *yaml.Node
	key    *yaml.Node // nil for a sequence item
	marker Marker
	doc    int
	obj    meta.ObjectID
	inFlow bool
	// written: the marker is a comment in the file, not a Site.
	written bool
}

// edit replaces data[start:end] with text.
type edit struct {
	start, end int
	text       string
}

// UpdateBytes applies the policies to one YAML file's bytes. It returns the
// new bytes (data itself when nothing changed), the changes per object, and
// the targets it left alone with the reason (e.g. block scalars). A file
// that does not parse is an error.
func UpdateBytes(data []byte, policies Policies) ([]byte, []meta.ObjectResult, []error, error) {
	out, objs, skipped, _, _, err := update(data, policies, nil)
	return out, objs, skipped, err
}

// UpdateSites is UpdateBytes with the sites as markers of the scalars at
// their positions, where the file has no marker of its own (a written
// marker wins): a repository's discovered images are updated without
// markers, by the same byte-exact rules.
func UpdateSites(data []byte, sites []Site, policies Policies) ([]byte, []meta.ObjectResult, []error, error) {
	out, objs, skipped, _, _, err := update(data, policies, nil, sites...)
	return out, objs, skipped, err
}

// Markers returns the markers of one YAML file's bytes, with their lines
// and values, without a path.
func Markers(data []byte) ([]MarkerSite, error) {
	_, _, _, _, markers, err := update(data, nil, nil)
	return markers, err
}

// FileMarkers is Markers of a file of any kind UpdateDir reads, told by
// its name: YAML, or one of Formats.
func FileMarkers(name string, data []byte) ([]MarkerSite, error) {
	if f := FormatOf(name); f != nil {
		_, _, _, markers, err := updateFormat(f, data, nil, nil)
		return markers, err
	}
	return Markers(data)
}

type planned struct {
	index  int // into the targets
	change meta.Change
	start  int
	end    int
}

// update is UpdateBytes, also returning the edits and every marker found
// (without a path), whatever its policy and whether or not its value
// changes; the markers are returned with the error of a file that parses
// but cannot be rewritten, where they were found all the same. A value
// keep says to keep is left as it is (Options.Keep).
func update(data []byte, policies Policies, keep func(MarkerSite, string) bool, sites ...Site) ([]byte, []meta.ObjectResult, []error, []edit, []MarkerSite, error) {
	src := newSource(data)
	docs, err := parseDocs(data)
	if err != nil {
		return data, nil, nil, nil, nil, err
	}
	targets := findTargets(src, docs, sites...)
	markers := make([]MarkerSite, len(targets))
	for i, t := range targets {
		markers[i] = MarkerSite{Line: t.node.Line, Marker: t.marker, Value: t.node.Value}
	}

	var plan []planned
	skipped := unmarkable(docs)
	want := make([]string, len(targets))
	for i, t := range targets {
		want[i] = t.node.Value
		img, ok := policies[t.marker.Policy]
		if !ok {
			continue
		}
		val, ok := t.marker.Value(img, t.node.Value)
		if !ok || val == t.node.Value || keep != nil && keep(markers[i], val) {
			continue
		}
		start, end, err := src.extent(t.node)
		if err != nil {
			var unsupported errUnsupported
			if errors.As(err, &unsupported) {
				skipped = append(skipped, fmt.Errorf("line %d: %s", t.node.Line, unsupported.reason))
				continue
			}
			return data, nil, nil, nil, markers, err
		}
		want[i] = val
		plan = append(plan, planned{index: i, start: start, end: end,
			change: meta.Change{OldValue: t.node.Value, NewValue: val, Setter: t.marker.String()}})
	}
	if len(plan) == 0 {
		return data, nil, skipped, nil, markers, nil
	}

	// Render each value in the style it had. Re-parsing the result proves
	// every marked value reads back as intended; if a plain value did not,
	// quote all plain values and try once more.
	var out []byte
	var edits []edit
	for _, forceQuote := range []bool{false, true} {
		edits = edits[:0]
		for _, p := range plan {
			edits = append(edits, edit{p.start, p.end, render(targets[p.index], p.change.NewValue, forceQuote)})
		}
		out = splice(data, edits)
		if err = verify(out, want, shiftSites(src, targets, edits)...); err == nil {
			break
		}
	}
	if err != nil {
		return data, nil, nil, nil, markers, fmt.Errorf("rewriting the marked values would change the file's meaning (%v); left unchanged", err)
	}

	var objs []meta.ObjectResult
	lastDoc := -1
	for _, p := range plan {
		t := targets[p.index]
		if t.doc != lastDoc {
			objs = append(objs, meta.ObjectResult{ObjectID: t.obj})
			lastDoc = t.doc
		}
		objs[len(objs)-1].Changes = append(objs[len(objs)-1].Changes, p.change)
	}
	return out, objs, skipped, edits, markers, nil
}

// verify re-parses out and checks that its targets (with the sites, at
// their positions in out) have the wanted values.
func verify(out []byte, want []string, sites ...Site) error {
	docs, err := parseDocs(out)
	if err != nil {
		return err
	}
	got := findTargets(newSource(out), docs, sites...)
	if len(got) != len(want) {
		return fmt.Errorf("%d marked values after the update, %d before", len(got), len(want))
	}
	for i, t := range got {
		if t.node.Value != want[i] {
			return fmt.Errorf("line %d reads %q, want %q", t.node.Line, t.node.Value, want[i])
		}
	}
	return nil
}

func parseDocs(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, &n)
	}
}

func splice(data []byte, edits []edit) []byte {
	sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	var b bytes.Buffer
	b.Grow(len(data) + 64*len(edits))
	last := 0
	for _, e := range edits {
		b.Write(data[last:e.start])
		b.WriteString(e.text)
		last = e.end
	}
	b.Write(data[last:])
	return b.Bytes()
}

// render writes value as a scalar in the style the target had.
func render(t target, value string, forceQuote bool) string {
	switch {
	case t.node.Style&yaml.SingleQuotedStyle != 0:
		return "'" + strings.ReplaceAll(value, "'", "''") + "'"
	case t.node.Style&yaml.DoubleQuotedStyle != 0:
		return strconv.Quote(value)
	case forceQuote || !plainSafe(value, t.inFlow):
		return strconv.Quote(value)
	}
	return value
}

// plainSafe reports whether value can be written as a plain scalar and read
// back as the same string. An image value is always a string: a tag like
// 1.10 is quoted, even over a plain 1.9, which YAML reads as a float.
func plainSafe(value string, inFlow bool) bool {
	if value == "" || value != strings.TrimSpace(value) {
		return false
	}
	if strings.ContainsAny(value[:1], "-?:,[]{}#&*!|>'\"%@`") {
		return false
	}
	if strings.Contains(value, ": ") || strings.Contains(value, " #") || strings.HasSuffix(value, ":") {
		return false
	}
	for _, r := range value {
		if r < 0x20 || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 {
			return false
		}
	}
	if inFlow && strings.ContainsAny(value, ",[]{}") {
		return false
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(value), &n); err != nil || len(n.Content) != 1 {
		return false
	}
	v := n.Content[0]
	if v.Kind != yaml.ScalarNode || v.Value != value {
		return false
	}
	return v.ShortTag() == yaml.NodeTagString
}

// ParseDocuments parses a file's YAML documents as the setters read them.
func ParseDocuments(data []byte) ([]*yaml.Node, error) { return parseDocs(data) }

// shiftSites gives the targets marked by sites their positions after the
// edits: a value's line never changes (values are single-line), its
// column moves by what the edits before it on its line added or removed.
func shiftSites(src *source, targets []target, edits []edit) []Site {
	var out []Site
	for _, t := range targets {
		if t.written {
			continue
		}
		start, err := src.offset(t.node.Line, t.node.Column)
		if err != nil {
			continue
		}
		col := t.node.Column
		for _, e := range edits {
			if e.start < start && src.lineOf(e.start) == t.node.Line {
				col += utf8.RuneCountInString(e.text) - utf8.RuneCount(src.data[e.start:e.end])
			}
		}
		out = append(out, Site{Line: t.node.Line, Column: col, Marker: t.marker})
	}
	return out
}
