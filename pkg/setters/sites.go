package setters

import (
	"bytes"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Site marks the scalar at a position (1-based line and column, as the YAML
// parser counts them) as if it carried Marker: what pkg/discover finds in
// a repository without markers.
type Site struct {
	Line, Column int
	Marker       Marker
}

// Comment is the marker as a YAML comment, # {"$imagepolicy": "ns:name"}.
func (m Marker) Comment() string {
	b, _ := json.Marshal(map[string]string{markerKey: m.String()})
	return "# " + string(bytes.ReplaceAll(b, []byte(`":"`), []byte(`": "`)))
}

// FlowStyleReason is why AddMarkers skips a value in flow style; ExpandFlow
// rewrites its mapping so that it can be marked.
const FlowStyleReason = "in flow style a comment cannot mark one value"

// AddMarkers writes each site's marker as a comment on its scalar, and
// changes nothing else, byte for byte: after the value on its line, or,
// when that line already ends in a comment, alone on a new line above the
// field (with the line's own break, CRLF kept). A scalar that already
// carries a marker keeps it (so running it again adds nothing). A scalar a
// comment cannot mark alone is skipped with the reason: one in flow style
// ({...} or [...]: the comment would mark the collection), a multi-line
// scalar, a sequence item. The result is parsed again and must find every
// marker it wrote on the value it was written for.
func AddMarkers(data []byte, sites []Site) (out []byte, added []Site, skipped []error, err error) {
	src := newSource(data)
	docs, err := parseDocs(data)
	if err != nil {
		return data, nil, nil, err
	}
	want := map[[2]int]Marker{}
	for _, s := range sites {
		want[[2]int{s.Line, s.Column}] = s.Marker
	}
	var edits []edit
	expect := map[string]int{} // marker + value → how many the result must hold
	for _, t := range findTargets(src, docs, sites...) {
		m, ok := want[[2]int{t.node.Line, t.node.Column}]
		if !ok {
			continue // a marker the file had, not asked about
		}
		switch {
		case t.written && t.marker != m:
			skipped = append(skipped, fmt.Errorf("line %d: already marked %s, kept", t.node.Line, t.marker))
			continue
		case t.written:
			continue
		case t.inFlow:
			skipped = append(skipped, fmt.Errorf("line %d: %s", t.node.Line, FlowStyleReason))
			continue
		case t.key == nil:
			skipped = append(skipped, fmt.Errorf("line %d: a sequence item cannot carry a marker", t.node.Line))
			continue
		case t.node.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
			skipped = append(skipped, fmt.Errorf("line %d: a block scalar cannot carry a marker", t.node.Line))
			continue
		}
		start, end, err := src.extent(t.node)
		if err != nil || src.lineOf(end-1) != t.node.Line || src.lineOf(start) != t.node.Line {
			skipped = append(skipped, fmt.Errorf("line %d: a multi-line value cannot carry a marker", t.node.Line))
			continue
		}
		if t.node.LineComment == "" && !hasComment(src.line(t.node.Line)[end-src.lines[t.node.Line-1]:]) {
			edits = append(edits, edit{end, end, " " + m.Comment()})
		} else {
			// The line ends in a comment of its own: the marker goes alone
			// above the field, where the setters read it too.
			key := t.key
			lineStart := src.lines[key.Line-1]
			indent := bytes.Repeat([]byte(" "), leadingSpaces(src.line(key.Line)))
			edits = append(edits, edit{lineStart, lineStart, string(indent) + m.Comment() + lineBreak(src, key.Line)})
		}
		added = append(added, Site{Line: t.node.Line, Column: t.node.Column, Marker: m})
		expect[m.String()+"\x00"+t.node.Value]++
	}
	if len(edits) == 0 {
		return data, added, skipped, nil
	}
	out = splice(data, edits)
	docs, err = parseDocs(out)
	if err != nil {
		return data, nil, nil, fmt.Errorf("writing the markers would break the file (%v); left unchanged", err)
	}
	for _, t := range findTargets(newSource(out), docs) {
		expect[t.marker.String()+"\x00"+t.node.Value]--
	}
	for k, n := range expect {
		if n > 0 {
			return data, nil, nil, fmt.Errorf("marker %s would not be read back; left unchanged", bytes.SplitN([]byte(k), []byte{0}, 2)[0])
		}
	}
	return out, added, skipped, nil
}

// hasComment reports whether the rest of a line after a value holds a
// comment.
func hasComment(rest []byte) bool {
	t := bytes.TrimLeft(rest, " \t")
	return len(t) > 0 && t[0] == '#'
}

func leadingSpaces(line []byte) int {
	return len(line) - len(bytes.TrimLeft(line, " "))
}

// lineBreak is the break that ends line n (LF when it is the last).
func lineBreak(s *source, n int) string {
	if n >= len(s.lines) {
		return "\n"
	}
	l := s.line(n)
	start := s.lines[n-1] + len(l)
	return string(s.data[start:s.lines[n]])
}
