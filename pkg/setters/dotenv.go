package setters

import (
	"bytes"
	"fmt"
	"strings"
)

// DotenvFormat finds marked values in .env files (.env, .env.*, *.env),
// as Docker Compose, fly.io and the dotenv libraries read them: lines of
// [export ]KEY=VALUE, the value unquoted, 'single' or "double" quoted. The
// marker is a # comment after the value or on the line before. The format
// is lines, so it is read line by line; no parser library is needed.
var DotenvFormat = Format{Kind: "dotenv", Matches: isDotenv, Targets: dotenvTargets, Values: dotenvValues, Sites: valueSites(dotenvValues, false, "value")}

func isDotenv(name string) bool {
	return name == ".env" || strings.HasPrefix(name, ".env.") || strings.HasSuffix(name, ".env")
}

func dotenvTargets(data []byte) ([]Target, []error, error) {
	var targets []Target
	var skipped []error
	var pending Marker // a marker on a comment line, for the next line
	hasPending := false
	for i, off := range lineStarts(data) {
		line := data[off:lineEnd(data, off)]
		if i == 0 && bytes.HasPrefix(line, utf8BOM) {
			line, off = line[len(utf8BOM):], off+len(utf8BOM)
		}
		text := bytes.TrimSpace(line)
		switch {
		case len(text) == 0:
			hasPending = false
			continue
		case text[0] == '#':
			pending, hasPending = markerComment(string(text[1:]))
			continue
		}
		m, marked := pending, hasPending
		hasPending = false
		start, end, comment, err := dotenvValue(line)
		if c, ok := markerComment(comment); ok {
			m, marked = c, true
		}
		switch {
		case !marked:
		case err != nil:
			skipped = append(skipped, fmt.Errorf("line %d: %w", i+1, err))
		default:
			targets = append(targets, Target{Start: off + start, End: off + end, Line: i + 1, Marker: m})
		}
	}
	return targets, skipped, nil
}

// dotenvValue is where a KEY=VALUE line's value is, without its quotes,
// and the text of its trailing comment (after the #).
func dotenvValue(line []byte) (start, end int, comment string, err error) {
	eq := bytes.IndexByte(line, '=')
	if eq < 0 {
		return 0, 0, "", fmt.Errorf("is not KEY=VALUE")
	}
	key := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(line[:eq])), "export "))
	if key == "" || strings.ContainsAny(key, " \t\"'#") {
		return 0, 0, "", fmt.Errorf("is not KEY=VALUE")
	}
	i := eq + 1
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	rest := line[i:]
	if len(rest) > 0 && (rest[0] == '"' || rest[0] == '\'') {
		closing := bytes.IndexByte(rest[1:], rest[0])
		if closing < 0 {
			return 0, 0, "", fmt.Errorf("its quoted value goes on past the line")
		}
		start, end = i+1, i+1+closing
		after := bytes.TrimSpace(rest[closing+2:])
		if c, ok := bytes.CutPrefix(after, []byte("#")); ok {
			comment = string(c)
		}
		return start, end, comment, nil
	}
	// Unquoted: a # after a space starts a comment.
	end = len(line)
	for j := i; j < len(line); j++ {
		if line[j] == '#' && (j == i || line[j-1] == ' ' || line[j-1] == '\t') {
			comment, end = string(line[j+1:]), j
			break
		}
	}
	value := bytes.TrimRight(line[i:end], " \t\r")
	return i, i + len(value), comment, nil
}
