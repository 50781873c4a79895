package setters

import (
	"encoding/json"
	"io"
	"strings"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/imagename"
)

// Field is the part of an image a marker sets.
type Field string

const (
	// FieldRef sets the whole reference, name:tag[@digest].
	FieldRef Field = ""
	// FieldTag sets the tag.
	FieldTag Field = "tag"
	// FieldName sets the image name.
	FieldName Field = "name"
	// FieldDigest sets the digest.
	FieldDigest Field = "digest"
)

// Marker is a parsed $imagepolicy comment.
type Marker struct {
	// Policy is NAMESPACE:NAME.
	Policy string
	Field  Field
}

// String is the marker's value as written, e.g. apps:podinfo:tag.
func (m Marker) String() string {
	if m.Field == FieldRef {
		return m.Policy
	}
	return m.Policy + ":" + string(m.Field)
}

// Value is what the marker sets for img over the value written now; ok is
// false when img lacks it (a digest marker for an image without a
// digest). A name is kept as written when it names the policy's
// repository in another spelling: busybox:1.36 becomes busybox:1.37, not
// docker.io/library/busybox:1.37, as Renovate keeps a name, so that a
// marker written on a short name (by hand or by discover --write-markers)
// changes only the tag.
func (m Marker) Value(img meta.ImageRef, current string) (string, bool) {
	switch m.Field {
	case FieldTag:
		return img.Tag, true
	case FieldName:
		return writtenName(img.Name, current), true
	case FieldDigest:
		return img.Digest, img.Digest != ""
	}
	if cur, err := ParseImage(current); err == nil {
		img.Name = writtenName(img.Name, cur.Name)
	}
	return img.String(), true
}

// writtenName is written when it names the same repository as name; else
// name.
func writtenName(name, written string) string {
	if written != "" && SameRepository(name, written) {
		return written
	}
	return name
}

// SameImage reports whether a and b are one image: the same repository
// (SameRepository), tag and digest.
func SameImage(a, b meta.ImageRef) bool {
	return a.Tag == b.Tag && a.Digest == b.Digest && SameRepository(a.Name, b.Name)
}

// SameRepository reports whether a and b name one repository, by their
// canonical names (pkg/imagename): busybox and docker.io/library/busybox
// do; a name that does not parse is only itself.
func SameRepository(a, b string) bool {
	return a == b || imagename.Normalize(a) == imagename.Normalize(b)
}

const markerKey = "$imagepolicy"

// parseMarker parses a YAML comment. It is a marker only when, after the
// '#', it holds exactly one JSON object whose only key is $imagepolicy with
// a valid NAMESPACE:NAME[:tag|:name|:digest] value; any other text makes it
// an ordinary comment.
func parseMarker(comment string) (Marker, bool) {
	text, ok := strings.CutPrefix(strings.TrimSpace(comment), "#")
	if !ok || !strings.Contains(text, markerKey) {
		return Marker{}, false
	}
	dec := json.NewDecoder(strings.NewReader(text))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil || len(obj) != 1 {
		return Marker{}, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return Marker{}, false // trailing text
	}
	raw, ok := obj[markerKey]
	if !ok {
		return Marker{}, false
	}
	var value string
	if err := json.Unmarshal(raw, &value); err != nil {
		return Marker{}, false
	}
	return ParseMarkerValue(value)
}

// ParseMarkerValue parses a marker's value, NAMESPACE:NAME[:tag|:name|:digest]
// (what String writes, and what a hold records as its setter).
func ParseMarkerValue(value string) (Marker, bool) {
	parts := strings.Split(value, ":")
	m := Marker{}
	switch len(parts) {
	case 2:
		m.Policy = value
	case 3:
		m.Policy = parts[0] + ":" + parts[1]
		m.Field = Field(parts[2])
		if m.Field != FieldTag && m.Field != FieldName && m.Field != FieldDigest {
			return Marker{}, false
		}
	default:
		return Marker{}, false
	}
	if !ValidPolicy(m.Policy) {
		return Marker{}, false
	}
	return m, true
}
