package setters

import (
	"bytes"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// HCLFormat finds marked values in Terraform and OpenTofu files and other
// HCL (*.tf, *.tofu, *.tfvars, *.hcl): an attribute's plain string, such
// as an ECS or Cloud Run container's image = "…", marked by a # or //
// comment after it or on the line before. The file is read by HashiCorp's
// own parser (hcl/v2's hclsyntax), so what is an attribute and where its
// string's bytes are is what Terraform reads; a string with an
// interpolation or an escape is no plain value, and is reported.
var HCLFormat = Format{Kind: "HCL", Matches: isHCL, Targets: hclTargets, Values: hclValues, Sites: valueSites(hclValues, false, "value")}

func isHCL(name string) bool {
	switch path.Ext(name) {
	case ".tf", ".tofu", ".tfvars", ".hcl":
		return true
	}
	return false
}

func hclTargets(data []byte) ([]Target, []error, error) {
	file, diags := hclsyntax.ParseConfig(data, "", hcl.InitialPos)
	if diags.HasErrors() {
		d := diags.Errs()[0].(*hcl.Diagnostic)
		if d.Subject != nil {
			return nil, nil, fmt.Errorf("line %d: %s; %s", d.Subject.Start.Line, d.Summary, d.Detail)
		}
		return nil, nil, fmt.Errorf("%s; %s", d.Summary, d.Detail)
	}
	marks := hclMarkers(data)
	var targets []Target
	var skipped []error
	var walk func(b *hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, a := range b.Attributes {
			line := a.NameRange.Start.Line
			m, ok := marks[line]
			if !ok {
				continue
			}
			delete(marks, line)
			start, end, ok := plainString(data, a.Expr)
			if !ok {
				skipped = append(skipped, fmt.Errorf("line %d: %s is not a plain string: mark a quoted value without ${…} or escapes", line, a.Name))
				continue
			}
			targets = append(targets, Target{Start: start, End: end, Line: line, Marker: m})
		}
		for _, block := range b.Blocks {
			walk(block.Body)
		}
	}
	walk(file.Body.(*hclsyntax.Body))
	for line := range marks {
		skipped = append(skipped, fmt.Errorf("line %d: the marker names no attribute on its line or the next", line))
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].Start < targets[j].Start })
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].Error() < skipped[j].Error() })
	return targets, skipped, nil
}

// hclMarkers are the markers of data's comments by the line they mark:
// their own, or the next when the comment is alone on its line.
func hclMarkers(data []byte) map[int]Marker {
	tokens, _ := hclsyntax.LexConfig(data, "", hcl.InitialPos)
	marks := map[int]Marker{}
	for i, t := range tokens {
		if t.Type != hclsyntax.TokenComment {
			continue
		}
		text := strings.TrimSpace(string(t.Bytes))
		var body string
		switch {
		case strings.HasPrefix(text, "#"):
			body = text[1:]
		case strings.HasPrefix(text, "//"):
			body = text[2:]
		default:
			continue // a /* block */ comment
		}
		m, ok := markerComment(body)
		if !ok {
			continue
		}
		line := t.Range.Start.Line
		if i == 0 || tokens[i-1].Type == hclsyntax.TokenNewline || tokens[i-1].Range.Start.Line < line {
			line++
		}
		marks[line] = m
	}
	return marks
}

// plainString is where a quoted string's bytes are, without its quotes,
// when expr is one with no interpolation and no escape (its bytes are its
// value).
func plainString(data []byte, expr hclsyntax.Expression) (int, int, bool) {
	t, ok := expr.(*hclsyntax.TemplateExpr)
	if !ok || len(t.Parts) != 1 {
		return 0, 0, false
	}
	lit, ok := t.Parts[0].(*hclsyntax.LiteralValueExpr)
	if !ok || lit.Val.Type() != cty.String || !lit.Val.IsKnown() || lit.Val.IsNull() {
		return 0, 0, false
	}
	r := lit.Range()
	if r.Start.Byte < 1 || r.End.Byte >= len(data) || data[r.Start.Byte-1] != '"' || data[r.End.Byte] != '"' {
		return 0, 0, false
	}
	if lit.Val.AsString() != string(data[r.Start.Byte:r.End.Byte]) || bytes.ContainsAny(data[r.Start.Byte:r.End.Byte], "\n") {
		return 0, 0, false
	}
	return r.Start.Byte, r.End.Byte, true
}
