package setters

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// DockerfileFormat finds marked images in Dockerfiles (Dockerfile,
// Containerfile, *.Dockerfile, Dockerfile.* but documents such as
// Dockerfile.md): FROM's image, COPY's
// --from=IMAGE and ARG NAME=IMAGE. A Dockerfile's comments must start a
// line, so the marker is the comment line just before the instruction. The
// file is read by BuildKit's own parser (moby/buildkit), so that what is an
// instruction is what docker build says: a marker-like line inside a
// heredoc or a continued RUN is no instruction, and the escape directive
// is honoured. The value is then found in the instruction's first line,
// and must be there, unquoted or in plain double quotes.
var DockerfileFormat = Format{Kind: "Dockerfile", Matches: isDockerfile, Targets: dockerfileTargets, Sites: valueSites(dockerfileValues, true, "image")}

// IsDockerfile reports whether UpdateDir and pkg/discover read a file of
// this name as a Dockerfile (Dockerfile.yaml is YAML).
func IsDockerfile(name string) bool {
	f := FormatOf(name)
	return f != nil && f.Kind == DockerfileFormat.Kind
}

func isDockerfile(name string) bool {
	lower := strings.ToLower(name)
	switch path.Ext(lower) {
	case ".md", ".markdown", ".txt", ".rst", ".adoc", ".orig", ".bak":
		return false // Dockerfile.md documents one
	}
	return lower == "dockerfile" || lower == "containerfile" || strings.HasSuffix(lower, ".dockerfile") ||
		strings.HasPrefix(lower, "dockerfile.") || strings.HasPrefix(lower, "containerfile.")
}

func dockerfileTargets(data []byte) ([]Target, []error, error) {
	res, err := parser.Parse(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	lines := lineStarts(data)
	var targets []Target
	var skipped []error
	for _, n := range res.AST.Children {
		if n.StartLine < 2 || n.StartLine > len(lines) {
			continue
		}
		// The marker is the line just before: the parser keeps the
		// comments before an instruction across blank lines too.
		prev := bytes.TrimSpace(bytes.TrimPrefix(data[lines[n.StartLine-2]:lineEnd(data, lines[n.StartLine-2])], utf8BOM))
		comment, isComment := bytes.CutPrefix(prev, []byte("#"))
		if !isComment {
			continue
		}
		m, ok := markerComment(string(comment))
		if !ok {
			continue
		}
		off := lines[n.StartLine-1]
		line := data[off:lineEnd(data, off)]
		start, end, err := dockerfileValue(n, line)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("line %d: %s %w", n.StartLine, strings.ToUpper(n.Value), err))
			continue
		}
		// FROM and COPY --from name a whole reference; an ARG may hold a
		// tag alone.
		ref := !strings.EqualFold(n.Value, "arg")
		targets = append(targets, Target{Start: off + start, End: off + end, Line: n.StartLine, Marker: m, Ref: ref})
	}
	return targets, skipped, nil
}

// dockerfileValue is where in the instruction's first line its marked
// value is: the image of FROM, the --from of COPY, the value of an ARG's
// one NAME=VALUE; the parser's reading of the instruction must agree.
func dockerfileValue(n *parser.Node, line []byte) (int, int, error) {
	fields := fieldsAt(line)
	if len(fields) < 2 {
		return 0, 0, fmt.Errorf("continues its value on the next line: put it on the instruction's line")
	}
	switch strings.ToLower(n.Value) {
	case "from":
		for _, f := range fields[1:] {
			word := string(line[f[0]:f[1]])
			if strings.HasPrefix(word, "--") {
				continue
			}
			if n.Next == nil || n.Next.Value != word {
				return 0, 0, fmt.Errorf("image is not on the instruction's line")
			}
			return f[0], f[1], nil
		}
	case "copy":
		for _, f := range fields[1:] {
			word := string(line[f[0]:f[1]])
			if v, ok := strings.CutPrefix(strings.ToLower(word), "--from="); ok && v != "" {
				return f[1] - len(v), f[1], nil
			}
		}
		return 0, 0, fmt.Errorf("has no --from=IMAGE to set")
	case "arg":
		if len(fields) != 2 {
			return 0, 0, fmt.Errorf("declares several arguments: mark an ARG of one")
		}
		f := fields[1]
		word := line[f[0]:f[1]]
		eq := bytes.IndexByte(word, '=')
		if eq < 0 {
			return 0, 0, fmt.Errorf("has no default value to set")
		}
		start, end := f[0]+eq+1, f[1]
		if v := line[start:end]; len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			start, end = start+1, end-1
		}
		return start, end, nil
	default:
		return 0, 0, fmt.Errorf("holds no image the setters set (FROM, COPY --from, ARG)")
	}
	return 0, 0, fmt.Errorf("has no image")
}

// utf8BOM may start a file; it is no part of its first line's text.
var utf8BOM = []byte("\xef\xbb\xbf")

// lineStarts are the offsets of data's lines, split at LF as the
// Dockerfile parser and .env readers split them (a CR before it stays in
// the line).
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, c := range data {
		if c == '\n' && i+1 < len(data) {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// lineEnd is where the line starting at off ends, before its LF.
func lineEnd(data []byte, off int) int {
	if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
		return off + i
	}
	return len(data)
}

// fieldsAt are the offsets of line's fields, split at spaces and tabs, up
// to a continuation backslash at its end.
func fieldsAt(line []byte) [][2]int {
	line = bytes.TrimRight(line, "\r\n")
	if t := bytes.TrimRight(line, " \t"); bytes.HasSuffix(t, []byte(`\`)) {
		line = t[:len(t)-1]
	}
	var out [][2]int
	start := -1
	for i, c := range line {
		space := c == ' ' || c == '\t'
		switch {
		case space && start >= 0:
			out = append(out, [2]int{start, i})
			start = -1
		case !space && start < 0:
			start = i
		}
	}
	if start >= 0 {
		out = append(out, [2]int{start, len(line)})
	}
	return out
}

// DockerfileImage is an image a Dockerfile pulls: its line and column
// (1-based, the column in bytes), its instruction (FROM, COPY) and its
// reference as written.
type DockerfileImage struct {
	Line, Column int
	Instruction  string
	Value        string
}

// DockerfileImages are the images a Dockerfile's FROM and COPY --from
// instructions pull, in file order: what discovery finds in it. A name of
// an earlier stage, a stage's number, scratch and a value not on its
// instruction's line are none.
func DockerfileImages(data []byte) ([]DockerfileImage, error) {
	res, err := parser.Parse(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	lines := lineStarts(data)
	stages := map[string]bool{"scratch": true}
	var out []DockerfileImage
	for _, n := range res.AST.Children {
		instr := strings.ToUpper(n.Value)
		if (instr != "FROM" && instr != "COPY") || n.StartLine < 1 || n.StartLine > len(lines) {
			continue
		}
		off := lines[n.StartLine-1]
		start, end, err := dockerfileValue(n, data[off:lineEnd(data, off)])
		if err != nil {
			continue
		}
		value := string(data[off+start : off+end])
		if !stages[strings.ToLower(value)] && strings.Trim(value, "0123456789") != "" {
			out = append(out, DockerfileImage{Line: n.StartLine, Column: start + 1, Instruction: instr, Value: value})
		}
		if instr == "FROM" {
			// FROM IMAGE AS NAME names a stage; stages are also known by
			// their number, which the check above leaves out.
			if as := n.Next; as != nil && as.Next != nil && strings.EqualFold(as.Next.Value, "as") && as.Next.Next != nil {
				stages[strings.ToLower(as.Next.Next.Value)] = true
			}
		}
	}
	return out, nil
}

// dockerfileValues are the images DockerfileImages finds, as Values for
// valueSites.
func dockerfileValues(data []byte) ([]Value, error) {
	images, err := DockerfileImages(data)
	if err != nil {
		return nil, err
	}
	lines := lineStarts(data)
	out := make([]Value, 0, len(images))
	for _, img := range images {
		start := lines[img.Line-1] + img.Column - 1
		out = append(out, Value{Line: img.Line, Column: img.Column, Start: start, End: start + len(img.Value)})
	}
	return out, nil
}

// AddDockerfileMarkers is DockerfileFormat's AddMarkers.
func AddDockerfileMarkers(data []byte, sites []Site) ([]byte, []Site, []error, error) {
	return DockerfileFormat.AddMarkers(data, sites)
}

// AddMarkers writes each site's marker as a comment line just before its
// line (with the line's indentation and line break; every format here
// takes a # comment on the line before as the marker of the next), as
// setters.AddMarkers does for YAML: nothing else changes, a value already
// marked keeps its marker, and the result must find every marker it wrote
// on its value.
func (f *Format) AddMarkers(data []byte, sites []Site) (out []byte, added []Site, skipped []error, err error) {
	if f.NoMarkers != "" {
		// Each refusal names what to write instead.
		var vals []Value
		if f.Values != nil {
			vals, _ = f.Values(data)
		}
		for _, s := range sites {
			what := ""
			if i := slices.IndexFunc(vals, func(v Value) bool { return v.Line == s.Line && v.Column == s.Column }); i >= 0 && vals[i].Path != "" {
				what = fmt.Sprintf(" (pointer %s, policy %s)", vals[i].Path, s.Marker)
			}
			skipped = append(skipped, fmt.Errorf("line %d: %s%s", s.Line, f.NoMarkers, what))
		}
		return data, nil, skipped, nil
	}
	marked, _, err := f.Targets(data)
	if err != nil {
		return nil, nil, nil, err
	}
	lines := lineStarts(data)
	sites = slices.Clone(sites)
	slices.SortFunc(sites, func(a, b Site) int { return a.Line - b.Line })
	var edits []edit
	for _, s := range sites {
		if s.Line < 1 || s.Line > len(lines) {
			skipped = append(skipped, fmt.Errorf("line %d: not in the file", s.Line))
			continue
		}
		if slices.ContainsFunc(marked, func(t Target) bool { return t.Line == s.Line }) {
			continue
		}
		off := lines[s.Line-1]
		line := data[off:lineEnd(data, off)]
		indent := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
		eol := "\n"
		if bytes.HasSuffix(line, []byte("\r")) {
			eol = "\r\n"
		}
		edits = append(edits, edit{start: off, end: off, text: string(indent) + s.Marker.Comment() + eol})
		added = append(added, s)
	}
	if len(edits) == 0 {
		return data, nil, skipped, nil
	}
	out = splice(data, edits)
	again, _, err := f.Targets(out)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the marked file does not parse: %w", err)
	}
	for i, s := range added {
		// Each marker written before it moves a site one line down.
		line := s.Line + i + 1
		if !slices.ContainsFunc(again, func(t Target) bool { return t.Line == line && t.Marker == s.Marker }) {
			return nil, nil, nil, fmt.Errorf("line %d: the marker written is not found on its value", s.Line)
		}
	}
	return out, added, skipped, nil
}
