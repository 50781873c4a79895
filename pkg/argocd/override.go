// Package argocd reads, merges and writes Argo CD's parameter override
// file, .argocd-source-<app>.yaml, the file Argo CD's repo server merges
// over an Application's source before it renders the Application's path.
// image-toolkit writes it for applications whose manifests carry no markers:
// kustomize.images for Kustomize applications and helm.parameters for Helm
// applications.
//
// Two readers have to agree with this package, and it is built around them:
//
//   - Argo CD reads the file with sigs.k8s.io/yaml (YAML 1.1 scalars, as
//     go-yaml v2 resolves them) into JSON, merges that as a JSON merge patch
//     over the source, and decodes the result with encoding/json (keys
//     matched case-insensitively). What this package reports as the file's
//     images and parameters is read exactly that way (see argoRead), so a
//     value Argo CD would read as a number, or a file it would refuse, is
//     refused here too instead of being committed.
//   - argocd-image-updater writes the same file with go-yaml v3 (two-space
//     indent, sequences not indented under their key, parameters as
//     name/value/forcestring sorted by name). The encoder here is that
//     encoder, so a file image-updater wrote and this package updates differs
//     only in the values that changed, and users moving off image-updater
//     get no reformatting commit.
//
// Unlike image-updater, which re-marshals only the keys it knows, the file
// is edited as a YAML node tree: every other key, comment and entry is kept
// as it was. A JSON merge patch replaces lists whole, so kustomize.images in
// the file replaces the Application's own spec.source.kustomize.images: the
// caller writes every image the application needs overridden, not only the
// ones that changed.
//
// ReadApplication reads, from an Application's JSON, what tells where those
// files go: each rendered source (ref-only sources skipped), how Argo CD
// rendered it, and the name Argo CD gives the file.
//
// The package knows nothing of Kubernetes or git: it maps bytes to bytes.
package argocd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// FileName is the name of app's override file, which Argo CD reads in the
// directory of the Application's source path.
func FileName(app string) string {
	return ".argocd-source-" + app + ".yaml"
}

// File is an override file being edited.
type File struct {
	// prefix is the text before the document that the encoder cannot
	// reproduce: a "---" marker with the comments and directives before it,
	// or the whole of a file that holds only comments.
	prefix []byte
	doc    *yaml.Node // a DocumentNode holding one mapping
}

// Parse reads an override file; empty data is an empty file. It refuses
// data Argo CD could not read as an override of images and parameters, and
// more than one YAML document, since Argo CD reads only the first.
func Parse(data []byte) (*File, error) {
	f := &File{prefix: leadingPrefix(data)}
	// The prefix stays out of the node tree, so its comments are not
	// written twice.
	dec := yaml.NewDecoder(bytes.NewReader(data[min(len(f.prefix), len(data)):]))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		doc = yaml.Node{Kind: yaml.DocumentNode}
	case err != nil:
		return nil, fmt.Errorf("override file: %w", err)
	default:
		var next yaml.Node
		if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
			return nil, errors.New("override file: more than one YAML document; Argo CD reads only the first")
		}
	}
	if doc.Kind == 0 { // only comments: the prefix holds them
		doc = yaml.Node{Kind: yaml.DocumentNode}
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		doc.Content = []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}
	}
	if doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("override file: the document is %s, not a mapping", kindName(doc.Content[0]))
	}
	f.doc = &doc
	if _, err := argoRead(data); err != nil {
		return nil, err
	}
	return f, nil
}

// Bytes encodes the file as image-updater's encoder does, after checking
// that Argo CD reads back what was set.
func (f *File) Bytes() ([]byte, error) {
	var b bytes.Buffer
	b.Write(f.prefix)
	spellFlowNulls(f.doc, false)
	enc := yaml.NewEncoder(&b)
	if err := enc.Encode(f.doc); err != nil {
		return nil, fmt.Errorf("override file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("override file: %w", err)
	}
	if _, err := argoRead(b.Bytes()); err != nil {
		return nil, fmt.Errorf("override file as written: %w", err)
	}
	return b.Bytes(), nil
}

// spellFlowNulls writes out the implicit nulls of flow collections
// ({name} is {name: null}): go-yaml v3 encodes them as a quoted empty
// string, which Argo CD would then read instead of nothing.
func spellFlowNulls(n *yaml.Node, flow bool) {
	if flow && isNull(n) && n.Value == "" {
		n.Value = "null"
	}
	for _, c := range n.Content {
		spellFlowNulls(c, flow || n.Style&yaml.FlowStyle != 0)
	}
}

// leadingPrefix is data's leading run of blank lines, comments and
// directives together with the "---" line that ends it, or the whole of data
// when nothing but such lines follow; otherwise nil. go-yaml drops the
// marker and a comment-only document, so they are carried through verbatim.
func leadingPrefix(data []byte) []byte {
	rest := data
	for len(rest) > 0 {
		line, next := cutLine(rest)
		trimmed := bytes.TrimSpace(line)
		switch {
		case len(trimmed) == 0, trimmed[0] == '#', line[0] == '%':
			rest = next
		case bytes.Equal(bytes.TrimRight(line, " \t"), []byte("---")):
			return endLine(data[:len(data)-len(next)])
		default:
			return nil
		}
	}
	return endLine(data)
}

// cutLine cuts b after its first line break, which YAML spells \n, \r\n
// or \r.
func cutLine(b []byte) (line, rest []byte) {
	i := bytes.IndexAny(b, "\r\n")
	switch {
	case i < 0:
		return b, nil
	case b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n':
		return b[:i], b[i+2:]
	}
	return b[:i], b[i+1:]
}

// endLine is b, ending in a line break.
func endLine(b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) > 0 && b[len(b)-1] != '\n' && b[len(b)-1] != '\r' {
		b = append(b, '\n')
	}
	return b
}

// root is the file's top-level mapping.
func (f *File) root() *yaml.Node { return f.doc.Content[0] }

// lookup finds key in mapping m as encoding/json matches struct fields:
// case-insensitively. Two keys that match are refused, since which one Argo
// CD takes depends on details of two YAML libraries.
func lookup(m *yaml.Node, key, path string) (*yaml.Node, *yaml.Node, error) {
	var k, v *yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Kind == yaml.ScalarNode && strings.EqualFold(m.Content[i].Value, key) {
			if k != nil {
				return nil, nil, fmt.Errorf("override file: %s: key %q appears twice", path, key)
			}
			k, v = m.Content[i], m.Content[i+1]
		}
	}
	return k, v, nil
}

// child is the value of key in m, of the given kind, created when absent
// or null; another kind is an error that names the path.
func child(m *yaml.Node, key string, kind yaml.Kind, path string) (*yaml.Node, error) {
	_, v, err := lookup(m, key, path)
	if err != nil {
		return nil, err
	}
	path = join(path, key)
	switch {
	case v == nil:
		v = &yaml.Node{Kind: kind}
		m.Content = append(m.Content, str(key), v)
	case isNull(v):
		*v = yaml.Node{Kind: kind, LineComment: v.LineComment, HeadComment: v.HeadComment, FootComment: v.FootComment}
	case v.Kind != kind:
		return nil, fmt.Errorf("override file: %s is %s, not %s", path, kindName(v), kindName(&yaml.Node{Kind: kind}))
	}
	if v.Kind == yaml.MappingNode {
		v.Tag = "!!map"
	} else {
		v.Tag = "!!seq"
	}
	v.Style &^= yaml.FlowStyle // a list grown in flow style would stay on one line
	return v, nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// str is a string scalar, quoted when Argo CD would not read it back as
// this string from plain text.
func str(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if !plainReadsAs(s) {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// plainReadsAs is whether Argo CD's reader reads s, written plain, as the
// string s. go-yaml v3 quotes what YAML 1.2 would read as another type, but
// Argo CD reads YAML 1.1, where yes, on and 1:20 are a bool and a number.
func plainReadsAs(s string) bool {
	var v any
	return sigsyaml.Unmarshal([]byte(s), &v) == nil && v == s
}

// setStr makes n the string scalar s, keeping its style where Argo CD
// reads it back as s.
func setStr(n *yaml.Node, s string) {
	want := str(s)
	n.Kind, n.Tag, n.Value = yaml.ScalarNode, want.Tag, want.Value
	if want.Style != 0 || n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		n.Style = want.Style
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kindName names n's kind with its article, for errors.
func kindName(n *yaml.Node) string {
	name := "a document"
	switch n.Kind {
	case yaml.MappingNode:
		name = "a mapping"
	case yaml.SequenceNode:
		name = "a list"
	case yaml.AliasNode:
		name = "an alias"
	case yaml.ScalarNode:
		name = "a string"
		if t := strings.TrimPrefix(n.ShortTag(), "!!"); t != "str" {
			name = "a " + t
			if strings.IndexByte("aeiou", t[0]) >= 0 {
				name = "an " + t
			}
		}
	}
	return name
}

// scalar is the string value of n, which path names in errors.
func scalar(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", fmt.Errorf("override file: %s is %s, not a string", path, kindName(n))
	}
	return n.Value, nil
}
