package setters

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// A Format is a kind of file besides Kubernetes YAML whose images the
// setters update: a marker in the format's own comment syntax, with the
// same {"$imagepolicy": "NS:NAME[:tag|:name|:digest]"} payload, names the
// value on its line or the next. A format only finds the marked values
// (their bytes, line and marker); what to write, the holds, the result and
// the check that nothing but the values changed are this file's, the same
// for every format. Adding a format is an entry of Formats and its golden
// directory under testdata/formats.
type Format struct {
	// Kind names the format; it is the Kind of the one object a file of
	// the format is in results and commit messages.
	Kind string
	// Matches tells the format's files by base name.
	Matches func(name string) bool
	// Targets finds data's marked values, in file order. A marked value
	// the format cannot rewrite in place is a skip (reported; the others
	// are updated); err is a file that does not parse.
	Targets func(data []byte) (targets []Target, skipped []error, err error)
	// Sites, when the format has discovery (pkg/discover), are the
	// targets of the values sites name without a marker (a discovered
	// image's line and column), in file order.
	Sites func(data []byte, sites []Site) (targets []Target, skipped []error, err error)
	// Values, for a format whose images discovery tells by their keys
	// (HCL, TOML, .env, JSON), are its plain string values.
	Values func(data []byte) ([]Value, error)
	// NoMarkers, for a format that cannot carry a marker (JSON), says so
	// and what to do instead: UpdateDir reads its files only for the
	// values named (update.files) or discovered, and AddMarkers marks
	// none.
	NoMarkers string
}

// Target is a marked value of a file: its bytes data[Start:End], without
// quotes, its line (from 1) and its marker. Ref is set when the value is
// always a whole image reference (a Dockerfile's FROM): a :tag, :name or
// :digest marker then sets that part of it in place, rather than the
// value being that part alone (as an ARG or .env value may be).
type Target struct {
	Start, End int
	Line       int
	Marker     Marker
	Ref        bool
}

// Formats are the file formats besides YAML, tried in order:
// Dockerfiles, .env files, HCL (Terraform, OpenTofu) and TOML.
var Formats = []Format{DockerfileFormat, DotenvFormat, HCLFormat, TOMLFormat, JSONFormat}

// FormatOf is the format of a file by its base name, or nil for YAML or a
// file the setters do not read.
func FormatOf(name string) *Format {
	base := path.Base(name)
	if isManifest(base) {
		return nil // Dockerfile.yaml is YAML
	}
	for i := range Formats {
		if Formats[i].Matches(base) {
			return &Formats[i]
		}
	}
	return nil
}

// updateFormat is update for a file of format f: each marked value whose
// policy is given is set (unless keep says a person's value stays), and
// the file is checked to differ from data in those values alone.
func updateFormat(f *Format, data []byte, policies Policies, keep func(MarkerSite, string) bool, sites ...Site) ([]byte, []meta.ObjectResult, []error, []MarkerSite, error) {
	targets, skipped, err := formatTargets(f, data, sites)
	if err != nil {
		return nil, nil, skipped, nil, err
	}
	var markers []MarkerSite
	var edits []edit
	var changes []meta.Change
	var want []string
	for _, t := range targets {
		current := string(data[t.Start:t.End])
		markers = append(markers, MarkerSite{Line: t.Line, Marker: t.Marker, Value: current})
		img, ok := policies[t.Marker.Policy]
		if !ok {
			want = append(want, current)
			continue
		}
		value, ok, err := targetValue(t, img, current)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("line %d: %w", t.Line, err))
			ok = false
		}
		if ok && value != current && !bareWord(value) {
			skipped = append(skipped, fmt.Errorf("line %d: %q cannot be written unquoted", t.Line, value))
			ok = false
		}
		if !ok || value == current || (keep != nil && keep(markers[len(markers)-1], value)) {
			want = append(want, current)
			continue
		}
		edits = append(edits, edit{start: t.Start, end: t.End, text: value})
		changes = append(changes, meta.Change{OldValue: current, NewValue: value, Setter: t.Marker.String()})
		want = append(want, value)
	}
	if len(edits) == 0 {
		return data, nil, skipped, markers, nil
	}
	out := splice(data, edits)
	if err := verifyFormat(f, out, want, sites); err != nil {
		return nil, nil, skipped, markers, err
	}
	return out, []meta.ObjectResult{{ObjectID: meta.ObjectID{Kind: f.Kind}, Changes: changes}}, skipped, markers, nil
}

// targetValue is what t's marker sets for img over the value written now
// (Marker.Value; for a Ref target, the marked part of the reference).
func targetValue(t Target, img meta.ImageRef, current string) (string, bool, error) {
	if !t.Ref || t.Marker.Field == FieldRef {
		value, ok := t.Marker.Value(img, current)
		return value, ok, nil
	}
	cur, err := ParseImage(current)
	if err != nil {
		return "", false, fmt.Errorf("the marked reference %w", err)
	}
	switch t.Marker.Field {
	case FieldTag:
		if cur.Digest != "" {
			return "", false, fmt.Errorf("%q pins a digest, which a new tag would not change: mark the whole reference, or its :digest", current)
		}
		cur.Tag = img.Tag
	case FieldName:
		cur.Name = writtenName(img.Name, cur.Name)
	case FieldDigest:
		if img.Digest == "" {
			return "", false, nil
		}
		cur.Digest = img.Digest
	}
	return cur.String(), true, nil
}

// bareWord reports whether value can stand for a value of these formats
// as it is: an image reference has no space, quote, comment sign or
// escape, and a value that had any could end the value early.
func bareWord(value string) bool {
	return value != "" && !strings.ContainsAny(value, " \t\r\n\"'`#\\$")
}

// verifyFormat finds out's targets again: they must be data's, holding
// want, so that a rewrite changed nothing but the values.
func verifyFormat(f *Format, out []byte, want []string, sites []Site) error {
	targets, _, err := formatTargets(f, out, sites)
	if err != nil {
		return fmt.Errorf("the rewritten file does not parse: %w", err)
	}
	got := make([]string, len(targets))
	for i, t := range targets {
		got[i] = string(out[t.Start:t.End])
	}
	if !slices.Equal(got, want) {
		return errors.New("the rewritten file's marked values are not the ones written")
	}
	return nil
}

// formatTargets are data's marked targets and its sites', in file order;
// a site of a value a marker already names is that marker's.
func formatTargets(f *Format, data []byte, sites []Site) ([]Target, []error, error) {
	targets, skipped, err := f.Targets(data)
	if err != nil || len(sites) == 0 {
		return targets, skipped, err
	}
	if f.Sites == nil {
		return nil, skipped, fmt.Errorf("%s files have no discovered values to set", f.Kind)
	}
	more, left, err := f.Sites(data, sites)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range more {
		if !slices.ContainsFunc(targets, func(m Target) bool { return m.Start == t.Start }) {
			targets = append(targets, t)
		}
	}
	slices.SortFunc(targets, func(a, b Target) int { return a.Start - b.Start })
	return targets, append(skipped, left...), nil
}

// markerComment is the marker of a comment's text without its comment
// sign, if it holds one.
func markerComment(text string) (Marker, bool) {
	return parseMarker("#" + text)
}
