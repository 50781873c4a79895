package setters

import (
	"bytes"
	"fmt"

	"sigs.k8s.io/kustomize/kyaml/yaml"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// findTargets lists the marked scalars of the documents, in document order.
// A scalar at one of the sites' positions without a marker of its own is
// marked with the site's.
func findTargets(src *source, docs []*yaml.Node, sites ...Site) []target {
	w := &walker{src: src, inScalar: map[int]bool{}}
	if len(sites) > 0 {
		w.sites = map[[2]int]Marker{}
		for _, s := range sites {
			w.sites[[2]int{s.Line, s.Column}] = s.Marker
		}
	}
	w.head = w.sourceHeadMarker
	for i, doc := range docs {
		w.markMultiline(doc)
		w.doc, w.obj = i, identify(doc)
		w.walk(doc, false)
	}
	return w.targets
}

// unmarkable lists the markers that stand on a mapping or a list rather
// than on a scalar: a comment after a flow-style value
// (image: {repository: r, tag: t} # {"$imagepolicy": ...}) names no one
// value, so no value is set. They are reported, never skipped silently:
// the user wrote a marker and expects an update.
func unmarkable(docs []*yaml.Node) []error {
	var out []error
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				key, val := n.Content[i], n.Content[i+1]
				if val.Kind == yaml.ScalarNode {
					continue
				}
				for _, c := range []string{val.LineComment, key.LineComment} {
					m, ok := parseMarker(c)
					switch {
					case !ok:
						continue
					case val.Style&yaml.FlowStyle != 0:
						out = append(out, fmt.Errorf("line %d: the marker names %s, but %s is a %s, and %s: write %s in block style, one field a line, and mark the field to set (tk-image discover --expand-flow rewrites it so)",
							val.Line, m, key.Value, kindName(val), FlowStyleReason, key.Value))
					default:
						out = append(out, fmt.Errorf("line %d: the marker names %s, but %s is a %s, not one value: a marker marks the scalar it follows; put it on the field to set", key.Line, m, key.Value, kindName(val)))
					}
					break
				}
			}
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

func kindName(n *yaml.Node) string {
	style := ""
	if n.Style&yaml.FlowStyle != 0 {
		style = "flow-style "
	}
	if n.Kind == yaml.SequenceNode {
		return style + "list"
	}
	return style + "mapping"
}

// pairContext is where a mapping pair sits: its mapping and the pair before
// it (nil for the first).
type pairContext struct {
	mapping, prevKey, prevVal *yaml.Node
}

type walker struct {
	src      *source
	doc      int
	obj      meta.ObjectID
	targets  []target
	inScalar map[int]bool // lines inside multi-line scalars, where a # is text
	// head finds a marker above a field.
	head func(key *yaml.Node, around pairContext) (Marker, bool)
	// sites mark scalars by position (line, column).
	sites map[[2]int]Marker
}

func identify(doc *yaml.Node) meta.ObjectID {
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return meta.ObjectID{}
	}
	rn := yaml.NewRNode(doc.Content[0])
	str := func(path ...string) string {
		n, err := rn.Pipe(yaml.Lookup(path...))
		if err != nil || n == nil || n.YNode().Kind != yaml.ScalarNode {
			return ""
		}
		return n.YNode().Value
	}
	return meta.ObjectID{
		APIVersion: str("apiVersion"),
		Kind:       str("kind"),
		Namespace:  str("metadata", "namespace"),
		Name:       str("metadata", "name"),
	}
}

// markMultiline records the lines that belong to block and multi-line
// quoted scalars: a comment-looking line there is part of a value.
func (w *walker) markMultiline(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode {
		last := 0
		switch {
		case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
			last = w.src.blockEndLine(n.Line)
		case n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0:
			if _, end, err := w.src.extent(n); err == nil {
				last = w.src.lineOf(end - 1)
			}
		}
		for l := n.Line + 1; l <= last; l++ {
			w.inScalar[l] = true
		}
	}
	for _, c := range n.Content {
		w.markMultiline(c)
	}
}

func (w *walker) walk(n *yaml.Node, inFlow bool) {
	inFlow = inFlow || n.Style&yaml.FlowStyle != 0
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			w.walk(c, inFlow)
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			if item.Kind == yaml.ScalarNode {
				w.check(item, nil, pairContext{}, inFlow)
			} else {
				w.walk(item, inFlow)
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			if val.Kind == yaml.ScalarNode {
				around := pairContext{mapping: n}
				if i > 0 {
					around.prevKey, around.prevVal = n.Content[i-2], n.Content[i-1]
				}
				w.check(val, key, around, inFlow)
			} else {
				w.walk(val, inFlow)
			}
		}
	}
}

// check records val as a target when its line comment is a marker, or, for
// a field, when a marker comment stands alone on the line above the key.
func (w *walker) check(val, key *yaml.Node, around pairContext, inFlow bool) {
	m, ok := parseMarker(val.LineComment)
	if !ok && key != nil {
		m, ok = w.head(key, around)
	}
	written := ok
	if !ok && w.sites != nil {
		m, ok = w.sites[[2]int{val.Line, val.Column}]
	}
	if ok {
		w.targets = append(w.targets, target{node: val, key: key, marker: m, doc: w.doc, obj: w.obj, inFlow: inFlow, written: written})
	}
}

// sourceHeadMarker reads the line above a key from the source: the parser
// files such a comment under whichever node it finds convenient (often as
// the previous key's foot comment), so positions are the reliable witness.
func (w *walker) sourceHeadMarker(key *yaml.Node, _ pairContext) (Marker, bool) {
	above := key.Line - 1
	if above < 1 || w.inScalar[above] {
		return Marker{}, false
	}
	// The key must begin its line (after indentation and "- " markers).
	line := w.src.line(key.Line)
	off, err := w.src.offset(key.Line, key.Column)
	if err != nil {
		return Marker{}, false
	}
	prefix := line[:off-w.src.lines[key.Line-1]]
	if len(bytes.Trim(prefix, " -")) != 0 {
		return Marker{}, false
	}
	text := bytes.TrimSpace(w.src.line(above))
	if len(text) == 0 || text[0] != '#' {
		return Marker{}, false
	}
	return parseMarker(string(text))
}
