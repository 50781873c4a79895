package migrate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// fields is embedded in every struct of the Flux types (flux.go): what
// decoding that object found wrong, to be reported when the converter is
// done with it (fluxObject.done). A wrong value in an object the converter
// drops (a second policy) is thus not reported, as nothing of it is used.
type fields struct {
	path     string   // the object's field path, "" at the top
	unknown  []string // keys the Flux type lacks, sorted
	problems []string // "field: want a string, got ..." for values of the wrong type
}

// node gives decode the fields of any Flux type, through the embedding.
func (f *fields) node() *fields { return f }

// decode fills into, a pointer to a Flux type, from obj (decoded JSON). It
// never fails: a value of the wrong type is left zero and recorded, with
// its path, in the fields of the object holding it.
func decode(obj map[string]any, into any) {
	decodeStruct("", obj, reflect.ValueOf(into).Elem())
}

func decodeStruct(path string, m map[string]any, v reflect.Value) {
	n, ok := v.Addr().Interface().(interface{ node() *fields })
	if !ok {
		panic(fmt.Sprintf("%s embeds no fields", v.Type())) // a Flux type written wrong; the tests decode every one
	}
	f := n.node()
	f.path = path
	known := map[string]bool{}
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if key == "" || key == "-" {
			continue
		}
		known[key] = true
		if val, ok := m[key]; ok && val != nil {
			decodeValue(f, at(path, key), val, v.Field(i))
		}
	}
	for k := range m {
		if !known[k] {
			f.unknown = append(f.unknown, k)
		}
	}
	slices.Sort(f.unknown)
}

// decodeValue sets v from val; wrong types are recorded in parent, the
// fields of the object holding the value.
func decodeValue(parent *fields, path string, val any, v reflect.Value) {
	wrong := func(want string) {
		parent.problems = append(parent.problems, path+": want "+want+", got "+describe(val))
	}
	switch v.Kind() {
	case reflect.Interface: // kept, never checked: read by no one
		v.Set(reflect.ValueOf(val))
	case reflect.String:
		s, ok := val.(string)
		if !ok {
			wrong("a string")
			return
		}
		v.SetString(s)
	case reflect.Bool:
		b, ok := val.(bool)
		if !ok {
			wrong("true or false")
			return
		}
		v.SetBool(b)
	case reflect.Pointer:
		m, ok := val.(map[string]any)
		if !ok {
			wrong("an object")
			return
		}
		p := reflect.New(v.Type().Elem())
		decodeStruct(path, m, p.Elem())
		v.Set(p)
	case reflect.Map: // of strings; {} stays an empty map, not nil: it can mean something
		m, ok := val.(map[string]any)
		if !ok {
			wrong("an object of strings")
			return
		}
		v.Set(reflect.ValueOf(decodeStrings(parent, path, m)))
	case reflect.Slice:
		list, ok := val.([]any)
		if !ok {
			wrong("a list")
			return
		}
		v.Set(decodeList(parent, path, list, v.Type()))
	default:
		panic(fmt.Sprintf("%s: a field of kind %s", path, v.Kind())) // a Flux type written wrong
	}
}

// decodeStrings decodes an object of strings; an item that is not a string
// is a problem, and left out.
func decodeStrings(parent *fields, path string, m map[string]any) map[string]string {
	out := make(map[string]string, len(m))
	for k, item := range m {
		s, ok := item.(string)
		if !ok {
			parent.problems = append(parent.problems, path+"."+k+": want a string, got "+describe(item))
			continue
		}
		out[k] = s
	}
	return out
}

// decodeList decodes a list of strings or of objects into a slice of typ;
// an item of the wrong shape is a problem, and left out.
func decodeList(parent *fields, path string, list []any, typ reflect.Type) reflect.Value {
	out := reflect.MakeSlice(typ, 0, len(list))
	for i, item := range list {
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		elem := reflect.New(typ.Elem()).Elem()
		switch elem.Kind() {
		case reflect.String:
			s, ok := item.(string)
			if !ok {
				parent.problems = append(parent.problems, itemPath+": want a string, got "+describe(item))
				continue
			}
			elem.SetString(s)
		case reflect.Struct:
			m, ok := item.(map[string]any)
			if !ok {
				parent.problems = append(parent.problems, itemPath+": want an object, got "+describe(item))
				continue
			}
			decodeStruct(itemPath, m, elem)
		default:
			panic(fmt.Sprintf("%s: a list of %s", path, elem.Kind()))
		}
		out = reflect.Append(out, elem)
	}
	return out
}

func at(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names a decoded JSON value for messages.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case bool:
		return fmt.Sprintf("%t", v)
	case json.Number:
		return "the number " + v.String()
	case float64:
		return fmt.Sprintf("the number %v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
