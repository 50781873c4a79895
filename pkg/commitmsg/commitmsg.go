// Package commitmsg renders commit messages from Go templates with the data
// Flux's image automation gives them (.AutomationObject, .Changed in the
// ResultV2 shape, .Values), with Sprig's hermetic functions. Validate is what
// the automation and a job check before any work; Render is what the job
// commits with. It is its own package so that the setters know only YAML.
package commitmsg

import (
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/Masterminds/sprig/v3"
	"k8s.io/apimachinery/pkg/types"

	"toolkit.dev/image-toolkit/pkg/setters"
)

// Data is what commit message templates see.
type Data struct {
	// AutomationObject is the ImageUpdateAutomation (namespace/name); empty
	// for jobs that no automation created.
	AutomationObject types.NamespacedName
	// Changed is the update's result, in Flux's ResultV2 shape.
	Changed setters.ResultV2
	// Values are the messageTemplateValues.
	Values map[string]string
}

// DefaultTemplate is used when a commit has no template: a subject,
// then every change by file and object.
const DefaultTemplate = `Update images
{{- with .AutomationObject.Name }} ({{ $.AutomationObject }}){{ end }}
{{ range $file, $objects := .Changed.FileChanges }}
- File: {{ $file }}
{{- range $object, $changes := $objects }}
  - Object: {{ $object.Kind }}/{{ $object.Namespace }}/{{ $object.Name }}
    Changes:
{{- range $changes }}
    - {{ .OldValue }} -> {{ .NewValue }}
{{- end }}
{{- end }}
{{ end -}}
`

var templateFields = []string{"AutomationObject", "Changed", "Values"}

// parseTemplate parses a message template with the hermetic Sprig functions
// (no environment, network or randomness) and checks that it refers only to
// fields the data has, in every branch, not only those a sample run takes.
func parseTemplate(text string) (*template.Template, error) {
	if strings.TrimSpace(text) == "" {
		text = DefaultTemplate
	}
	tmpl, err := template.New("commit message").Funcs(sprig.HermeticTxtFuncMap()).
		Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("invalid commit message template: %w", err)
	}
	for _, t := range tmpl.Templates() {
		// A {{ define }}d template can be called with any dot; only $ is
		// known to be the data there.
		if err := checkNode(t.Root, t.Name() == tmpl.Name()); err != nil {
			return nil, fmt.Errorf("invalid commit message template: %w", err)
		}
	}
	return tmpl, nil
}

// Validate checks a message template: it must parse, refer only to
// existing fields, and render for an example change with the given values.
func Validate(text string, values map[string]string) error {
	example := &setters.Result{Files: []setters.FileResult{{Path: "deploy/app.yaml", Objects: []setters.ObjectResult{{
		ObjectID: setters.ObjectID{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "app"},
		Changes:  []setters.Change{{OldValue: "app:1.0.0", NewValue: "app:1.0.1", Setter: "default:app"}},
	}}}}}
	_, err := Render(text, Data{
		AutomationObject: types.NamespacedName{Namespace: "default", Name: "automation"},
		Changed:          example.V2(),
		Values:           values,
	})
	return err
}

// Render renders a commit message; an empty template means
// DefaultTemplate.
func Render(text string, data Data) (string, error) {
	tmpl, err := parseTemplate(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("rendering the commit message template: %w", err)
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", errors.New("the commit message template rendered an empty message")
	}
	return b.String(), nil
}

func checkField(name string) error {
	for _, f := range templateFields {
		if name == f {
			return nil
		}
	}
	if name == "Updated" {
		return errors.New("the template uses .Updated, which does not exist: Flux removed it; use .Changed (e.g. .Changed.FileChanges, .Changed.Objects, .Changed.Changes)")
	}
	return fmt.Errorf("the template uses .%s, which does not exist; the data has .AutomationObject, .Changed and .Values", name)
}

// checkNode checks field references whose dot is the template data.
func checkNode(n parse.Node, dotIsData bool) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNode(c, dotIsData); err != nil {
				return err
			}
		}
	case *parse.ActionNode:
		return checkNode(n.Pipe, dotIsData)
	case *parse.IfNode:
		return checkBranch(&n.BranchNode, dotIsData, dotIsData)
	case *parse.RangeNode:
		return checkBranch(&n.BranchNode, dotIsData, false)
	case *parse.WithNode:
		return checkBranch(&n.BranchNode, dotIsData, false)
	case *parse.TemplateNode:
		return checkNode(n.Pipe, dotIsData)
	case *parse.PipeNode:
		if n == nil {
			return nil
		}
		for _, cmd := range n.Cmds {
			for _, arg := range cmd.Args {
				if err := checkNode(arg, dotIsData); err != nil {
					return err
				}
			}
		}
	case *parse.ChainNode:
		return checkNode(n.Node, dotIsData)
	case *parse.FieldNode:
		if dotIsData {
			return checkField(n.Ident[0])
		}
	case *parse.VariableNode:
		if n.Ident[0] == "$" && len(n.Ident) > 1 {
			return checkField(n.Ident[1])
		}
	}
	return nil
}

func checkBranch(b *parse.BranchNode, dotIsData, bodyDotIsData bool) error {
	if err := checkNode(b.Pipe, dotIsData); err != nil {
		return err
	}
	if err := checkNode(b.List, bodyDotIsData); err != nil {
		return err
	}
	return checkNode(b.ElseList, dotIsData)
}
