package setters

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// source maps the parser's positions (1-based line, 1-based column counted in
// characters) to byte offsets in the original file.
type source struct {
	data  []byte
	lines []int // byte offset of the start of each line
}

// newSource indexes lines by the same breaks the YAML scanner counts: LF,
// CRLF, CR, NEL, LS and PS.
func newSource(data []byte) *source {
	s := &source{data: data, lines: []int{0}}
	for i := 0; i < len(data); {
		if n := breakLen(data, i); n > 0 {
			i += n
			s.lines = append(s.lines, i)
			continue
		}
		i++
	}
	return s
}

// breakLen returns the length of the line break at i, or 0.
func breakLen(b []byte, i int) int {
	switch b[i] {
	case '\n':
		return 1
	case '\r':
		if i+1 < len(b) && b[i+1] == '\n' {
			return 2
		}
		return 1
	case 0xC2:
		if i+1 < len(b) && b[i+1] == 0x85 {
			return 2
		}
	case 0xE2:
		if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
			return 3
		}
	}
	return 0
}

// line returns the bytes of a 1-based line, without its break.
func (s *source) line(n int) []byte {
	if n < 1 || n > len(s.lines) {
		return nil
	}
	start := s.lines[n-1]
	end := len(s.data)
	if n < len(s.lines) {
		end = s.lines[n]
	}
	for i := start; i < end; i++ {
		if breakLen(s.data, i) > 0 {
			return s.data[start:i]
		}
	}
	return s.data[start:end]
}

// offset converts a parser position to a byte offset.
func (s *source) offset(line, col int) (int, error) {
	l := s.line(line)
	if l == nil && line != len(s.lines) {
		return 0, fmt.Errorf("line %d out of range", line)
	}
	off := 0
	for c := 1; c < col; c++ {
		if off >= len(l) {
			return 0, fmt.Errorf("line %d has no column %d", line, col)
		}
		_, size := utf8.DecodeRune(l[off:])
		off += size
	}
	return s.lines[line-1] + off, nil
}

// lineOf returns the 1-based line of a byte offset.
func (s *source) lineOf(off int) int {
	lo, hi := 0, len(s.lines)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if s.lines[mid] <= off {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo + 1
}

// errUnsupported marks scalars we do not rewrite.
type errUnsupported struct{ reason string }

func (e errUnsupported) Error() string { return e.reason }

// extent returns the byte range [start, end) of a scalar node in the
// source: the quotes included for quoted styles. Tags and anchors before the
// scalar are not part of it.
func (s *source) extent(n *yaml.Node) (int, int, error) {
	start, err := s.offset(n.Line, n.Column)
	if err != nil {
		return 0, 0, err
	}
	start = s.skipProperties(start)
	d := s.data
	if start > len(d) {
		return 0, 0, fmt.Errorf("line %d: scalar starts past the end", n.Line)
	}
	switch {
	case n.Style&yaml.DoubleQuotedStyle != 0:
		if start >= len(d) || d[start] != '"' {
			return 0, 0, fmt.Errorf("line %d: expected a double-quoted scalar", n.Line)
		}
		for i := start + 1; i < len(d); i++ {
			switch d[i] {
			case '\\':
				i++
			case '"':
				return start, i + 1, nil
			}
		}
		return 0, 0, fmt.Errorf("line %d: unterminated double-quoted scalar", n.Line)
	case n.Style&yaml.SingleQuotedStyle != 0:
		if start >= len(d) || d[start] != '\'' {
			return 0, 0, fmt.Errorf("line %d: expected a single-quoted scalar", n.Line)
		}
		for i := start + 1; i < len(d); i++ {
			if d[i] == '\'' {
				if i+1 < len(d) && d[i+1] == '\'' {
					i++
					continue
				}
				return start, i + 1, nil
			}
		}
		return 0, 0, fmt.Errorf("line %d: unterminated single-quoted scalar", n.Line)
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		return 0, 0, errUnsupported{"block scalars (| and >) are not rewritten; use a plain or quoted scalar"}
	}
	if n.Value == "" {
		return 0, 0, errUnsupported{"an empty value is not rewritten; write a placeholder image"}
	}
	end, ok := matchPlain(d, start, n.Value)
	if !ok {
		return 0, 0, fmt.Errorf("line %d: plain scalar %q not found in the source", n.Line, n.Value)
	}
	return start, end, nil
}

// skipProperties skips a tag (!x) and an anchor (&x) before a scalar.
func (s *source) skipProperties(i int) int {
	d := s.data
	for i < len(d) && (d[i] == '!' || d[i] == '&') {
		for i < len(d) && d[i] != ' ' && d[i] != '\t' && breakLen(d, i) == 0 {
			i++
		}
		for i < len(d) && (d[i] == ' ' || d[i] == '\t' || breakLen(d, i) > 0) {
			i++
		}
	}
	return i
}

// matchPlain finds where a plain scalar with the given value ends in d,
// starting at start. A multi-line plain scalar folds each line break (with
// the indentation around it) into a space, and n breaks into n-1 newlines.
func matchPlain(d []byte, start int, value string) (int, bool) {
	if bytes.HasPrefix(d[start:], []byte(value)) {
		return start + len(value), true
	}
	i, v := start, 0
	for v < len(value) {
		c := value[v]
		if c == ' ' || c == '\n' {
			// Consume whitespace and breaks in the source, and the run of
			// spaces/newlines in the value they fold into.
			if i >= len(d) || !isSpaceOrBreak(d, i) {
				return 0, false
			}
			for i < len(d) && isSpaceOrBreak(d, i) {
				if n := breakLen(d, i); n > 0 {
					i += n
				} else {
					i++
				}
			}
			for v < len(value) && (value[v] == ' ' || value[v] == '\n') {
				v++
			}
			continue
		}
		if i >= len(d) || d[i] != c {
			return 0, false
		}
		i++
		v++
	}
	return i, true
}

func isSpaceOrBreak(d []byte, i int) bool {
	return d[i] == ' ' || d[i] == '\t' || breakLen(d, i) > 0
}

// blockEndLine returns the last line of a block scalar whose header is on
// line header: its content runs while lines are empty or indented at least as
// much as its first non-empty line.
func (s *source) blockEndLine(header int) int {
	indent := func(l []byte) (int, bool) {
		n := 0
		for n < len(l) && l[n] == ' ' {
			n++
		}
		return n, len(bytes.TrimSpace(l)) == 0
	}
	headerIndent, _ := indent(s.line(header))
	end, content := header, -1
	for ln := header + 1; ln <= len(s.lines); ln++ {
		n, empty := indent(s.line(ln))
		if empty {
			continue
		}
		if content < 0 {
			if n <= headerIndent {
				break
			}
			content = n
		}
		if n < content {
			break
		}
		end = ln
	}
	return end
}
