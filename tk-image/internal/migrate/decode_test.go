package migrate

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	// Proves what the converter relies on: values of the right type are
	// set, a value of the wrong type is left zero and named with its path
	// in the fields of the object holding it, keys the Flux type lacks are
	// listed sorted, null is absent, and {} stays an empty map.
	tests := []struct {
		name     string
		in       string
		check    func(*fluxImageUpdateAutomationSpec) bool
		problems []string // of the spec
		unknown  []string // of the spec
	}{
		{"right types are set", `{"interval": "5m", "suspend": true, "update": {"path": "./apps"}}`,
			func(s *fluxImageUpdateAutomationSpec) bool {
				return s.Interval == "5m" && s.Suspend && s.Update != nil && s.Update.Path == "./apps" && s.Update.path == "spec.update"
			}, nil, nil},
		{"wrong types are left zero and named", `{"interval": 5, "suspend": "yes", "update": [], "sourceRef": "x"}`,
			func(s *fluxImageUpdateAutomationSpec) bool {
				return s.Interval == "" && !s.Suspend && s.Update == nil && s.SourceRef == nil
			},
			[]string{"spec.interval: want a string, got the number 5", "spec.sourceRef: want an object, got the string \"x\"",
				"spec.suspend: want true or false, got the string \"yes\"", "spec.update: want an object, got a list"}, nil},
		{"null is absent", `{"interval": null, "git": null}`,
			func(s *fluxImageUpdateAutomationSpec) bool { return s.Interval == "" && s.Git == nil }, nil, nil},
		{"unknown keys are listed sorted", `{"zeta": 1, "alpha": {}, "interval": "1m"}`,
			func(s *fluxImageUpdateAutomationSpec) bool { return s.Interval == "1m" }, nil, []string{"alpha", "zeta"}},
		{"{} stays an empty map, bad values are dropped from it", `{"policySelector": {"matchLabels": {}}, "git": {"push": {"options": {"a": "b", "n": 1}}}}`,
			func(s *fluxImageUpdateAutomationSpec) bool {
				return s.PolicySelector.MatchLabels != nil && len(s.PolicySelector.MatchLabels) == 0 &&
					reflect.DeepEqual(s.Git.Push.Options, map[string]string{"a": "b"}) &&
					reflect.DeepEqual(s.Git.Push.problems, []string{"spec.git.push.options.n: want a string, got the number 1"})
			}, nil, nil},
		{"bad list items are dropped and named", `{"policySelector": {"matchExpressions": [{"key": "a", "values": ["x", 2]}, "b"]}}`,
			func(s *fluxImageUpdateAutomationSpec) bool {
				ps := s.PolicySelector
				return len(ps.MatchExpressions) == 1 && ps.MatchExpressions[0].path == "spec.policySelector.matchExpressions[0]" &&
					reflect.DeepEqual(ps.MatchExpressions[0].Values, []string{"x"}) &&
					reflect.DeepEqual(ps.MatchExpressions[0].problems, []string{"spec.policySelector.matchExpressions[0].values[1]: want a string, got the number 2"}) &&
					reflect.DeepEqual(ps.problems, []string{"spec.policySelector.matchExpressions[1]: want an object, got the string \"b\""})
			}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dec := json.NewDecoder(strings.NewReader(`{"spec": ` + tc.in + `}`))
			dec.UseNumber()
			var obj map[string]any
			if err := dec.Decode(&obj); err != nil {
				t.Fatal(err)
			}
			var doc fluxDocument[fluxImageUpdateAutomationSpec]
			decode(obj, &doc)
			if doc.Spec == nil {
				t.Fatalf("no spec; problems %q", doc.problems)
			}
			if !tc.check(doc.Spec) {
				t.Errorf("decoded %+v", *doc.Spec)
			}
			if got := doc.Spec.problems; !slicesEqualSorted(got, tc.problems) {
				t.Errorf("problems %q, want %q", got, tc.problems)
			}
			if got := doc.Spec.unknown; !reflect.DeepEqual(got, tc.unknown) {
				t.Errorf("unknown %q, want %q", got, tc.unknown)
			}
		})
	}
}

// slicesEqualSorted compares as sets: a map's keys come in random order.
func slicesEqualSorted(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s]--; seen[s] < 0 {
			return false
		}
	}
	return true
}

// Every Flux type is one decode can fill whatever the input: each struct
// embeds fields and each field is of a kind decodeValue handles, so its
// panics are unreachable from input.
func TestFluxTypesDecodable(t *testing.T) {
	nodeType := reflect.TypeFor[interface{ node() *fields }]()
	var check func(path string, typ reflect.Type)
	check = func(path string, typ reflect.Type) {
		if !reflect.PointerTo(typ).Implements(nodeType) {
			t.Errorf("%s (%s) embeds no fields", path, typ)
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Type == reflect.TypeFor[fields]() {
				continue
			}
			p := path + "." + f.Name
			switch ft := f.Type; ft.Kind() {
			case reflect.Interface, reflect.String, reflect.Bool:
			case reflect.Pointer:
				check(p, ft.Elem())
			case reflect.Map:
				if ft.Key().Kind() != reflect.String || ft.Elem().Kind() != reflect.String {
					t.Errorf("%s: a map of %s", p, ft.Elem())
				}
			case reflect.Slice:
				switch ft.Elem().Kind() {
				case reflect.String:
				case reflect.Struct:
					check(p+"[]", ft.Elem())
				default:
					t.Errorf("%s: a list of %s", p, ft.Elem())
				}
			default:
				t.Errorf("%s: a field of kind %s", p, ft.Kind())
			}
		}
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[fluxHeader](),
		reflect.TypeFor[fluxDocument[fluxImageRepositorySpec]](),
		reflect.TypeFor[fluxDocument[fluxImagePolicySpec]](),
		reflect.TypeFor[fluxDocument[fluxImageUpdateAutomationSpec]](),
	} {
		check(typ.Name(), typ)
	}
}
