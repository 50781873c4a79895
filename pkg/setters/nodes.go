package setters

import (
	"strings"

	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// UpdateNodes applies the policies to parsed objects, e.g. the items of a
// KRM function's ResourceList, by setting node values: the caller serializes
// them. Files are named by the objects' path annotations. Without source
// bytes, a marker above a field is the last line of the comment the parser
// attached there (the key's head comment, or the previous node's foot
// comment).
func UpdateNodes(items []*yaml.RNode, policies Policies) *Result {
	res := &Result{Files: []meta.FileResult{}}
	byPath := map[string]int{}
	for _, item := range items {
		w := &walker{inScalar: map[int]bool{}, head: commentHeadMarker}
		w.obj = identify(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{item.YNode()}})
		w.walk(item.YNode(), false)

		path, _, _ := kioutil.GetFileAnnotations(item)
		var changes []meta.Change
		for _, t := range w.targets {
			// The items' lines are the ResourceList's, not the file's.
			res.Markers = append(res.Markers, MarkerSite{Path: path, Marker: t.marker, Value: t.node.Value})
			img, ok := policies[t.marker.Policy]
			if !ok {
				continue
			}
			val, ok := t.marker.Value(img, t.node.Value)
			if !ok || val == t.node.Value || t.node.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
				continue
			}
			changes = append(changes, meta.Change{OldValue: t.node.Value, NewValue: val, Setter: t.marker.String()})
			t.node.Value = val
			t.node.Tag = yaml.NodeTagString
			if t.node.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 && !plainSafe(val, t.inFlow) {
				t.node.Style = yaml.DoubleQuotedStyle
			}
		}
		if len(changes) == 0 {
			continue
		}
		i, ok := byPath[path]
		if !ok {
			i = len(res.Files)
			byPath[path] = i
			res.Files = append(res.Files, meta.FileResult{Path: path})
		}
		res.Files[i].Objects = append(res.Files[i].Objects, meta.ObjectResult{ObjectID: w.obj, Changes: changes})
	}
	return res
}

// commentHeadMarker finds a marker comment directly above key among the
// comments the parser kept: the key's head comment; for the first key of a
// mapping, the mapping's head comment (a sequence item); otherwise the foot
// comment of the previous pair, which is where the parser puts a comment
// separated from the key by a blank line, or following a line comment.
func commentHeadMarker(key *yaml.Node, around pairContext) (Marker, bool) {
	if m, ok := lastLineMarker(key.HeadComment); ok {
		return m, true
	}
	if around.prevKey == nil {
		return lastLineMarker(around.mapping.HeadComment)
	}
	prev := around.prevVal
	for _, c := range []string{around.prevKey.FootComment, prev.FootComment} {
		if c == "" {
			continue
		}
		// After a one-line scalar the comment's place is known: it must
		// fill every line up to the key, or a blank line separates them.
		if prev.Kind == yaml.ScalarNode && prev.Line == around.prevKey.Line && !strings.Contains(prev.Value, "\n") &&
			key.Line-prev.Line-1 != strings.Count(strings.TrimRight(c, "\n"), "\n")+1 {
			continue
		}
		if m, ok := lastLineMarker(c); ok {
			return m, true
		}
	}
	return Marker{}, false
}

func lastLineMarker(c string) (Marker, bool) {
	c = strings.TrimRight(c, "\n")
	if c == "" {
		return Marker{}, false
	}
	return parseMarker(c[strings.LastIndexByte(c, '\n')+1:])
}
