package setters

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"sort"

	"github.com/pelletier/go-toml/v2/unstable"
)

// TOMLFormat finds marked values in TOML files (*.toml: fly.toml,
// netlify.toml, a tool's config): a key's string value, marked by a #
// comment after it or on the line before. The file is read by go-toml's
// own parser (pelletier/go-toml/v2's unstable.Parser, which keeps every
// node's bytes), so what is a key and where its string is is what a TOML
// reader says; a multi-line string or one with an escape is no plain
// value, and is reported.
var TOMLFormat = Format{Kind: "TOML", Matches: func(name string) bool { return path.Ext(name) == ".toml" }, Targets: tomlTargets, Values: tomlValues, Sites: valueSites(tomlValues, false, "value")}

func tomlTargets(data []byte) ([]Target, []error, error) {
	lines := lineStarts(data)
	lineOf := func(off int) int { return sort.SearchInts(lines, off+1) }
	p := unstable.Parser{KeepComments: true}
	p.Reset(data)
	var targets []Target
	var skipped []error
	var pending Marker
	pendingLine := 0
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Comment:
			if m, ok := markerComment(string(bytes.TrimPrefix(e.Data, []byte("#")))); ok {
				pending, pendingLine = m, lineOf(int(e.Raw.Offset))+1
			}
			continue
		case unstable.KeyValue:
		default:
			continue
		}
		line := lineOf(int(e.Raw.Offset))
		m, marked := pending, pendingLine == line
		if c := e.Next(); c != nil && c.Kind == unstable.Comment {
			if cm, ok := markerComment(string(bytes.TrimPrefix(c.Data, []byte("#")))); ok {
				m, marked = cm, true
			}
		}
		if !marked {
			continue
		}
		v := e.Value()
		start, end := int(v.Raw.Offset)+1, int(v.Raw.Offset+v.Raw.Length)-1
		raw := data[v.Raw.Offset : v.Raw.Offset+v.Raw.Length]
		if v.Kind != unstable.String || len(raw) < 2 || bytes.HasPrefix(raw, []byte(`"""`)) || bytes.HasPrefix(raw, []byte(`'''`)) ||
			!bytes.Equal(data[start:end], v.Data) {
			skipped = append(skipped, fmt.Errorf("line %d: the marked value is not a one-line string without escapes", line))
			continue
		}
		targets = append(targets, Target{Start: start, End: end, Line: line, Marker: m})
	}
	if err := p.Error(); err != nil {
		var pe *unstable.ParserError
		if errors.As(err, &pe) {
			return nil, nil, fmt.Errorf("line %d: %s", p.Shape(p.Range(pe.Highlight)).Start.Line, pe.Message)
		}
		return nil, nil, err
	}
	return targets, skipped, nil
}
