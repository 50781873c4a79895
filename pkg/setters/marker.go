package setters

import (
	"toolkit.dev/image-toolkit/pkg/apis/meta"

	"encoding/json"
	"io"
	"strings"
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

// Value is what the marker sets for img; ok is false when img lacks it
// (a digest marker for an image without a digest).
func (m Marker) Value(img meta.ImageRef) (string, bool) {
	switch m.Field {
	case FieldTag:
		return img.Tag, true
	case FieldName:
		return img.Name, true
	case FieldDigest:
		return img.Digest, img.Digest != ""
	}
	return img.String(), true
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
