package main

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	sigsjson "sigs.k8s.io/json"
)

// decodeStrict decodes JSON into v as the API server's strict field
// validation does (sigs.k8s.io/json, the decoder behind kubectl's
// --validate=strict): a field the type does not know is an error that
// names it by its path and lists the fields known there, so that a typo
// such as spec.filterTags.patern reads as one, not as a rule silently
// dropped or a bare `unknown field "patern"`.
func decodeStrict(data []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(data, v, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(strict))
	for _, e := range strict {
		msgs = append(msgs, explainUnknown(e, reflect.TypeOf(v)))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// explainUnknown adds to a strict-decoding error the fields known where
// it points, when it is an unknown field.
func explainUnknown(err error, t reflect.Type) string {
	msg := err.Error()
	path, ok := strings.CutPrefix(msg, `unknown field "`)
	if !ok {
		return msg
	}
	path = strings.TrimSuffix(path, `"`)
	parent := strings.Split(path, ".")
	parent = parent[:len(parent)-1]
	known := jsonFields(t, parent)
	if len(known) == 0 {
		return fmt.Sprintf("%s: unknown field", path)
	}
	return fmt.Sprintf("%s: unknown field; known here: %s", path, strings.Join(known, ", "))
}

// jsonFields are the JSON names of the fields of the struct at path
// (map keys and list indexes are stepped over) in t; nil when the path
// does not lead to a struct.
func jsonFields(t reflect.Type, path []string) []string {
	for {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		if len(path) == 0 {
			break
		}
		step := strings.TrimSuffix(path[0], "]")
		if i := strings.IndexByte(step, '['); i >= 0 {
			step = step[:i]
		}
		f, ok := fieldByJSON(t, step)
		if !ok {
			return nil
		}
		t, path = f.Type, path[1:]
	}
	var names []string
	collectJSON(t, &names)
	slices.Sort(names)
	return names
}

// fieldByJSON is t's field whose JSON name is name, through inlined
// (embedded) structs.
func fieldByJSON(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		n, inline := jsonName(f)
		if inline {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if g, ok := fieldByJSON(ft, name); ok {
				return g, true
			}
			continue
		}
		if n == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func collectJSON(t reflect.Type, names *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		n, inline := jsonName(f)
		switch {
		case inline:
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectJSON(ft, names)
			}
		case n != "":
			*names = append(*names, n)
		}
	}
}

// jsonName is a field's JSON name, "" for a field JSON leaves out;
// inline is true for an embedded struct whose fields are its parent's.
func jsonName(f reflect.StructField) (name string, inline bool) {
	tag := f.Tag.Get("json")
	if tag == "-" || !f.IsExported() {
		return "", false
	}
	n, opts, _ := strings.Cut(tag, ",")
	if f.Anonymous && (n == "" || strings.Contains(opts, "inline")) {
		return "", true
	}
	if n == "" {
		n = f.Name
	}
	return n, false
}
