package setters

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Value is a plain string of a file of a format without an image field
// of its own (HCL, TOML, .env, JSON), with the key that names it: what
// discovery (pkg/discover) reads for images, by their keys.
type Value struct {
	Key string
	// Path is where the value is, as discovery lists it: the key, or a
	// JSON value's pointer.
	Path string
	// Line and Column (from 1) are where the string's first byte is;
	// data[Start:End] its bytes, without quotes.
	Line, Column int
	Start, End   int
}

// position is the line and column (from 1) of offset off.
func position(lines []int, off int) (int, int) {
	line := sort.SearchInts(lines, off+1)
	return line, off - lines[line-1] + 1
}

// hclValues are the plain strings of an HCL file's attributes, in any
// block.
func hclValues(data []byte) ([]Value, error) {
	file, diags := hclsyntax.ParseConfig(data, "", hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s", diags.Errs()[0])
	}
	lines := lineStarts(data)
	var out []Value
	var walk func(b *hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, a := range b.Attributes {
			if start, end, ok := plainString(data, a.Expr); ok {
				line, col := position(lines, start)
				out = append(out, Value{Key: a.Name, Line: line, Column: col, Start: start, End: end})
			}
		}
		for _, block := range b.Blocks {
			walk(block.Body)
		}
	}
	walk(file.Body.(*hclsyntax.Body))
	slices.SortFunc(out, func(a, b Value) int { return a.Start - b.Start })
	return out, nil
}

// tomlValues are a TOML file's one-line strings without escapes, keyed
// by the last part of their key.
func tomlValues(data []byte) ([]Value, error) {
	lines := lineStarts(data)
	p := unstable.Parser{}
	p.Reset(data)
	var out []Value
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.KeyValue {
			continue
		}
		key := ""
		for it := e.Key(); it.Next(); {
			key = string(it.Node().Data)
		}
		v := e.Value()
		raw := data[v.Raw.Offset : v.Raw.Offset+v.Raw.Length]
		start, end := int(v.Raw.Offset)+1, int(v.Raw.Offset+v.Raw.Length)-1
		if v.Kind != unstable.String || len(raw) < 2 || bytes.HasPrefix(raw, []byte(`"""`)) || bytes.HasPrefix(raw, []byte(`'''`)) ||
			!bytes.Equal(data[start:end], v.Data) {
			continue
		}
		line, col := position(lines, start)
		out = append(out, Value{Key: key, Line: line, Column: col, Start: start, End: end})
	}
	if err := p.Error(); err != nil {
		return nil, err
	}
	return out, nil
}

// dotenvValues are a .env file's KEY=VALUE values.
func dotenvValues(data []byte) ([]Value, error) {
	lines := lineStarts(data)
	var out []Value
	for i, off := range lines {
		line := data[off:lineEnd(data, off)]
		if i == 0 && bytes.HasPrefix(line, utf8BOM) {
			line, off = line[len(utf8BOM):], off+len(utf8BOM)
		}
		if text := bytes.TrimSpace(line); len(text) == 0 || text[0] == '#' {
			continue
		}
		start, end, _, err := dotenvValue(line)
		if err != nil || start == end {
			continue
		}
		key, _, _ := strings.Cut(string(line), "=")
		key = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(key), "export "))
		ln, col := position(lines, off+start)
		out = append(out, Value{Key: key, Line: ln, Column: col, Start: off + start, End: off + end})
	}
	return out, nil
}

// valueSites makes a format's Sites of its values: the targets of the
// values sites name by line and column; ref marks them whole image
// references (Target.Ref), what names them in a skip.
func valueSites(values func([]byte) ([]Value, error), ref bool, what string) func([]byte, []Site) ([]Target, []error, error) {
	return func(data []byte, sites []Site) ([]Target, []error, error) {
		vals, err := values(data)
		if err != nil {
			return nil, nil, err
		}
		var targets []Target
		var skipped []error
		for _, s := range sites {
			i := slices.IndexFunc(vals, func(v Value) bool { return v.Line == s.Line && v.Column == s.Column })
			if i < 0 {
				skipped = append(skipped, fmt.Errorf("line %d: no %s at column %d to set", s.Line, what, s.Column))
				continue
			}
			targets = append(targets, Target{Start: vals[i].Start, End: vals[i].End, Line: s.Line, Marker: s.Marker, Ref: ref})
		}
		return targets, skipped, nil
	}
}

// ImageKey reports whether a key names an image, as discovery reads HCL,
// TOML, .env and JSON values: image, or a name ending in it (container_image,
// APP_IMAGE, baseImage).
func ImageKey(key string) bool {
	return strings.HasSuffix(strings.ToLower(key), "image")
}
