package setters

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// ExpandFlow rewrites in block style each flow mapping that holds a site,
// so that a marker comment can name the site's value alone (in flow style
// a comment would mark the whole mapping):
//
//   - {name: envoy, image: 'envoyproxy/envoy:v1.29.1'} # edge
//
// becomes
//
//   - name: envoy
//     image: 'envoyproxy/envoy:v1.29.1' # edge
//
// Only that mapping changes: keys and values keep their bytes (quotes,
// tags), the indentation follows the mapping's column (or its key's,
// for key: {...}), the line's break (CRLF) and trailing comment are kept.
// A mapping it cannot rewrite so is left alone and reported in skipped:
// one spread over lines, one holding collections or empty values, one
// inside another flow collection. It returns the sites at their new
// positions (every site, moved or not), and fails, leaving data unchanged,
// when the result would not parse back to the same values.
func ExpandFlow(data []byte, sites []Site) (out []byte, moved []Site, expanded int, skipped []error, err error) {
	docs, err := parseDocs(data)
	if err != nil {
		return data, sites, 0, nil, err
	}
	x := flowExpander{src: newSource(data), want: map[[2]int]bool{}}
	for _, s := range sites {
		x.want[[2]int{s.Line, s.Column}] = true
	}
	for _, d := range docs {
		x.walk(d, nil)
	}
	if len(x.edits) == 0 {
		return data, sites, 0, x.skipped, nil
	}
	out = splice(data, x.edits)
	moved = make([]Site, len(sites))
	for i, s := range sites {
		moved[i] = x.move(s)
	}
	if err := x.verify(out, sites, moved); err != nil {
		return data, sites, 0, nil, fmt.Errorf("expanding flow style would change the file's values (%v); left unchanged", err)
	}
	return out, moved, len(x.edits), x.skipped, nil
}

type flowExpander struct {
	src     *source
	want    map[[2]int]bool
	edits   []edit
	skipped []error
	// moves are the expansions' effects on positions, one per edit.
	moves []flowMove
}

// flowMove: the mapping on line at from (its first pair) is now lines
// line+first.., each value at its new column; lines after it shift by
// added.
type flowMove struct {
	line, first, added int
	// at maps a value's old column to its pair's index and new column.
	at map[int][2]int
}

// walk visits block nodes, expanding the outermost flow mappings that hold
// a site; key is the mapping's key when n is a mapping value.
func (x *flowExpander) walk(n, key *yaml.Node) {
	if n.Style&yaml.FlowStyle != 0 {
		if x.holdsSite(n) {
			if err := x.expand(n, key); err != nil {
				x.skipped = append(x.skipped, fmt.Errorf("line %d: flow style not expanded: %v", n.Line, err))
			}
		}
		return
	}
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			x.walk(c, nil)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			x.walk(n.Content[i+1], n.Content[i])
		}
	}
}

func (x *flowExpander) holdsSite(n *yaml.Node) bool {
	if n.Kind == yaml.ScalarNode {
		return x.want[[2]int{n.Line, n.Column}]
	}
	for _, c := range n.Content {
		if x.holdsSite(c) {
			return true
		}
	}
	return false
}

// expand writes the edit that rewrites the flow mapping n in block style.
func (x *flowExpander) expand(n, key *yaml.Node) error {
	s := x.src
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		return errors.New("only a flow mapping is expanded")
	}
	open, err := s.offset(n.Line, n.Column)
	if err != nil || open >= len(s.data) || s.data[open] != '{' {
		return errors.New("an anchor or tag on the mapping")
	}
	var pairs []string
	cols := map[int][2]int{}
	end := open + 1
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return errors.New("it holds a collection")
		}
		kt, _, err := x.text(k)
		if err != nil {
			return err
		}
		vt, vend, err := x.text(v)
		if err != nil {
			return err
		}
		cols[v.Column] = [2]int{len(pairs), utf8.RuneCountInString(kt) + 2}
		pairs = append(pairs, kt+": "+vt)
		end = vend
	}
	for end < len(s.data) && (s.data[end] == ' ' || s.data[end] == ',') {
		end++
	}
	if end >= len(s.data) || s.data[end] != '}' || s.lineOf(end) != n.Line {
		return errors.New("it spans lines")
	}
	end++
	line := s.line(n.Line)
	lineStart := s.lines[n.Line-1]
	if rest := strings.TrimLeft(string(line[end-lineStart:]), " \t"); rest != "" && rest[0] != '#' {
		return errors.New("more follows it on its line")
	}
	prefix := string(line[:open-lineStart])
	br := lineBreak(s, n.Line)
	var indent, first int
	start := open
	switch {
	case key == nil && strings.TrimLeft(strings.TrimRight(prefix, " "), " ") == "-":
		// A sequence item: the pairs line up under the first.
		indent = utf8.RuneCountInString(prefix)
	case key != nil && key.Line == n.Line && key.Column >= 1 && strings.HasSuffix(strings.TrimRight(prefix, " \t"), ":"):
		// key: {...}: the pairs go under the key, one level in.
		indent, first = key.Column-1+2, 1
		start = lineStart + strings.LastIndexByte(prefix, ':') + 1
	default:
		return errors.New("it is neither a sequence item nor a key's value alone on the key's line")
	}
	pad := strings.Repeat(" ", indent)
	text := strings.Join(pairs, br+pad)
	if first == 1 {
		text = br + pad + text
	}
	for old, c := range cols {
		cols[old] = [2]int{c[0], indent + c[1] + 1}
	}
	x.edits = append(x.edits, edit{start, end, text})
	x.moves = append(x.moves, flowMove{line: n.Line, first: first, added: first + len(pairs) - 1, at: cols})
	return nil
}

// text is a scalar's source text, with its properties, and its end.
func (x *flowExpander) text(n *yaml.Node) (string, int, error) {
	start, err := x.src.offset(n.Line, n.Column)
	if err != nil {
		return "", 0, err
	}
	_, end, err := x.src.extent(n)
	if err != nil {
		return "", 0, errors.New("it holds an empty or unreadable value")
	}
	t := string(x.src.data[start:end])
	if strings.ContainsAny(t, "\r\n") {
		return "", 0, errors.New("it spans lines")
	}
	return t, end, nil
}

// move is a site's position after the expansions.
func (x *flowExpander) move(s Site) Site {
	shift := 0
	for _, m := range x.moves {
		switch {
		case s.Line == m.line:
			if c, ok := m.at[s.Column]; ok {
				s.Column = c[1]
				shift += m.first + c[0]
			}
		case s.Line > m.line:
			shift += m.added
		}
	}
	s.Line += shift
	return s
}

// verify checks that the documents hold the same data, and the sites'
// values read the same at their new positions.
func (x *flowExpander) verify(out []byte, before, after []Site) error {
	docs, err := parseDocs(out)
	if err != nil {
		return err
	}
	oldDocs, _ := parseDocs(x.src.data)
	if len(docs) != len(oldDocs) {
		return errors.New("the documents differ")
	}
	for i := range docs {
		var a, b any
		if err := errors.Join(oldDocs[i].Decode(&a), docs[i].Decode(&b)); err != nil || !reflect.DeepEqual(a, b) {
			return fmt.Errorf("document %d differs (%v)", i+1, err)
		}
	}
	old, now := scalarsAt(oldDocs), scalarsAt(docs)
	for i, s := range before {
		a := after[i]
		if v, ok := now[[2]int{a.Line, a.Column}]; !ok || v != old[[2]int{s.Line, s.Column}] {
			return fmt.Errorf("line %d: %q is not at line %d column %d", s.Line, old[[2]int{s.Line, s.Column}], a.Line, a.Column)
		}
	}
	return nil
}

// scalarsAt maps each scalar's position to its value.
func scalarsAt(docs []*yaml.Node) map[[2]int]string {
	out := map[[2]int]string{}
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode {
			out[[2]int{n.Line, n.Column}] = n.Value
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	for _, d := range docs {
		walk(d)
	}
	return out
}
