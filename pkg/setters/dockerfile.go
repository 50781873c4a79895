package setters

import (
	"bytes"
	"fmt"
	"path"
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
var DockerfileFormat = Format{Kind: "Dockerfile", Matches: isDockerfile, Targets: dockerfileTargets}

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
