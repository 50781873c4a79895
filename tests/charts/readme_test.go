package charts

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the values tables of the charts' README.md from values.yaml")

const (
	tableBegin = "<!-- values:begin: generated from values.yaml by `go test ./tests/charts -run TestReadmeValues -update` -->"
	tableEnd   = "<!-- values:end -->"
)

// Each chart's README.md carries the table of its values, made from the
// `# --` comments of values.yaml; a value without one fails the test.
func TestReadmeValues(t *testing.T) {
	for _, c := range charts {
		t.Run(c, func(t *testing.T) {
			values, err := os.ReadFile(filepath.Join(chartDir(c), "values.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			table, err := valuesTable(values)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(chartDir(c), "README.md")
			readme, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			before, rest, ok1 := strings.Cut(string(readme), tableBegin)
			_, after, ok2 := strings.Cut(rest, tableEnd)
			if !ok1 || !ok2 {
				t.Fatalf("%s lacks the markers %s and %s", path, tableBegin, tableEnd)
			}
			want := before + tableBegin + "\n" + table + tableEnd + after
			if want == string(readme) {
				return
			}
			if *update {
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			t.Errorf("the values table of %s is not values.yaml's; run go test ./tests/charts -run TestReadmeValues -update", path)
		})
	}
}

func TestValuesTableRejectsUndocumented(t *testing.T) {
	for _, in := range []string{"a: 1\n", "x:\n  # -- fine\n  y: 1\n  z: 2\n"} {
		if _, err := valuesTable([]byte(in)); err == nil || !strings.Contains(err.Error(), "no `# --` description") {
			t.Errorf("%q: err = %v", in, err)
		}
	}
}

// valuesTable renders the Markdown table of a values.yaml: one row per
// value with a `# -- description` comment; maps without one are walked.
func valuesTable(src []byte) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return "", err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("values.yaml is not a map")
	}
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n|---|---|---|---|\n")
	if err := walkValues(&b, "", doc.Content[0]); err != nil {
		return "", err
	}
	return b.String(), nil
}

func walkValues(b *strings.Builder, prefix string, m *yaml.Node) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + k.Value
		desc, ok := description(k.HeadComment)
		if !ok {
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
				if err := walkValues(b, key+".", v); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("%s has no `# --` description", key)
		}
		var val any
		if err := v.Decode(&val); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		def, err := json.Marshal(val)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		fmt.Fprintf(b, "| `%s` | %s | `%s` | %s |\n", key, typeOf(v), strings.ReplaceAll(string(def), "|", `\|`), strings.ReplaceAll(desc, "|", `\|`))
	}
	return nil
}

// description is the text after the last `# --` of a head comment,
// continuation lines included.
func description(comment string) (string, bool) {
	lines := strings.Split(comment, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "# --") {
			start = i
		}
	}
	if start < 0 {
		return "", false
	}
	var words []string
	for i, l := range lines[start:] {
		l = strings.TrimPrefix(strings.TrimSpace(l), "#")
		if i == 0 {
			l = strings.TrimPrefix(strings.TrimSpace(l), "--")
		}
		if l = strings.TrimSpace(l); l != "" {
			words = append(words, l)
		}
	}
	return strings.Join(words, " "), true
}

func typeOf(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "object"
	case yaml.SequenceNode:
		return "list"
	}
	switch v.Tag {
	case "!!int":
		return "int"
	case "!!float":
		return "float"
	case "!!bool":
		return "bool"
	}
	return "string"
}

// Every value the schema allows has a default, with its description, in
// values.yaml: the README table then lists every value there is. (The
// schema's additionalProperties: false covers the other direction: helm
// validates values.yaml against it.)
func TestSchemaValuesHaveDefaults(t *testing.T) {
	for _, c := range charts {
		t.Run(c, func(t *testing.T) {
			var schema map[string]any
			b, err := os.ReadFile(filepath.Join(chartDir(c), "values.schema.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &schema); err != nil {
				t.Fatal(err)
			}
			var values map[string]any
			if b, err = os.ReadFile(filepath.Join(chartDir(c), "values.yaml")); err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &values); err != nil {
				t.Fatal(err)
			}
			var walk func(prefix string, s, v map[string]any)
			walk = func(prefix string, s, v map[string]any) {
				props, _ := s["properties"].(map[string]any)
				for k, ps := range props {
					val, ok := v[k]
					if !ok {
						t.Errorf("%s%s is in the schema but not in values.yaml", prefix, k)
						continue
					}
					if vm, ok := val.(map[string]any); ok {
						walk(prefix+k+".", ps.(map[string]any), vm)
					}
				}
			}
			if schema["additionalProperties"] != false {
				t.Error("the schema allows unknown top-level values")
			}
			walk("", schema, values)
		})
	}
}
