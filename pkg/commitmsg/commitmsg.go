// Package commitmsg renders commit messages from Go templates with the data
// Flux's image automation gives them (.AutomationObject, .Changed in the
// ResultV2 shape, .Values), with Sprig's hermetic functions. Validate is what
// the automation and a job check before any work; Render is what the job
// commits with. A pull request's title, body and head branch are templates
// with the same data, so they are Templates here too: one parser, one
// check of the fields, one set of functions for all four. It is its own
// package so that the setters know only YAML.
package commitmsg

import (
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/Masterminds/sprig/v3"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// Data is what commit message templates see.
type Data struct {
	// AutomationObject is the ImageUpdateAutomation (namespace/name); empty
	// for jobs that no automation created.
	AutomationObject ObjectName
	// Changed is the update's result, in Flux's ResultV2 shape.
	Changed setters.ResultV2
	// Values are the messageTemplateValues.
	Values map[string]string
}

// ObjectName is an object's namespace and name. It is what Flux gives
// templates as .AutomationObject (apimachinery's NamespacedName: the same
// fields, printed as namespace/name), declared here so that the write-back
// engine, which renders these templates, links no Kubernetes package.
type ObjectName struct {
	Namespace, Name string
}

// String is namespace/name, as Flux's templates print it.
func (n ObjectName) String() string { return n.Namespace + "/" + n.Name }

// WithAutomation is d with AutomationObject set.
func (d Data) WithAutomation(namespace, name string) Data {
	d.AutomationObject = ObjectName{Namespace: namespace, Name: name}
	return d
}

// DefaultTemplate is used when a commit has no template: a subject,
// then every change by file and object, then the source revisions the
// new images were built from, with the forge's compare page where the
// previous revision is known.
const DefaultTemplate = `Update images
{{- with .AutomationObject.Name }} ({{ $.AutomationObject }}){{ end }}
{{ range $file, $objects := .Changed.FileChanges }}
- File: {{ $file }}
{{- range $object, $changes := $objects }}
  - Object: {{ $object.Kind }}/{{ with $object.Namespace }}{{ . }}/{{ end }}{{ $object.Name }}
    Changes:
{{- range $changes }}
    - {{ .OldValue }} -> {{ .NewValue }}
{{- end }}
{{- end }}
{{ end -}}
{{- with .Changed.Sources }}
Source changes:
{{- range . }}
- {{ .URL }} {{ with .PreviousRevision }}{{ . }}..{{ end }}{{ .Revision }}{{ if .Verified }} (verified provenance){{ end }}{{ with .CompareURL }}: {{ . }}{{ end }}
{{- end }}
{{ end -}}
`

// DefaultTitleTemplate names each policy with its new tag (from :tag
// markers and full image references; a digest is left out), or counts them
// when there are more than three: "Update podinfo to 6.3.1".
const DefaultTitleTemplate = `
{{- $tags := dict -}}
{{- range .Changed.Changes -}}
  {{- $parts := splitList ":" .Setter -}}
  {{- if eq (len $parts) 2 -}}
    {{- $_ := set $tags (index $parts 1) (regexReplaceAll "^.*:" (regexReplaceAll "@.*$" .NewValue "") "") -}}
  {{- else if eq (index $parts 2) "tag" -}}
    {{- $_ := set $tags (index $parts 1) .NewValue -}}
  {{- end -}}
{{- end -}}
{{- $names := keys $tags | sortAlpha -}}
{{- if gt (len $names) 3 -}}
Update {{ len $names }} images
{{- else if eq (len $names) 0 -}}
Update images
{{- else -}}
Update {{ range $i, $n := $names }}{{ if $i }}, {{ end }}{{ $n }} to {{ get $tags $n }}{{ end }}
{{- end -}}
`

// DefaultBodyTemplate is a table of the changes, the source revisions
// they bring (with compare pages), who approved the images a promotion
// waited for approval for, and a word on the branch:
// it is rebuilt at every update, so a commit pushed to it is lost.
const DefaultBodyTemplate = `Image updates{{ with .AutomationObject.Name }} from ImageUpdateAutomation {{ $.AutomationObject }}{{ end }}:

| File | Object | Old | New |
| --- | --- | --- | --- |
{{ range $file, $objects := .Changed.FileChanges -}}
{{ range $object, $changes := $objects -}}
{{ range $changes -}}
| {{ $file }} | {{ $object.Kind }}/{{ $object.Name }} | ` + "`{{ .OldValue }}`" + ` | ` + "`{{ .NewValue }}`" + ` |
{{ end -}}
{{ end -}}
{{ end }}
{{- with .Changed.Sources }}
Source changes:

{{ range . -}}
- {{ .URL }}: {{ with .PreviousRevision }}` + "`{{ . }}`" + ` to {{ end }}` + "`{{ .Revision }}`" + `{{ if .Verified }}, verified provenance{{ end }}{{ with .CompareURL }} ({{ . }}){{ end }}
{{ range .Commits }}  - ` + "`{{ trunc 12 .SHA }}`" + ` {{ .Subject }}
{{ end }}{{ if gt .TotalCommits (len .Commits) }}  - and {{ sub .TotalCommits (len .Commits) }} more
{{ end }}{{ end }}
{{ end -}}
{{- with .Changed.Approvals }}
Approved for promotion:

{{ range . -}}
- ` + "`{{ .Digest }}` by `{{ .By }}`" + `
{{ end }}
{{ end -}}
This request is kept up to date by image-toolkit: its branch is rebuilt from the base at every update, so commits pushed to it are replaced. It is closed when the base already has these changes.
`

// DefaultBranchTemplate is an automation's update stream: one head branch,
// so at most one open request, per automation.
const DefaultBranchTemplate = `image-toolkit/{{ .AutomationObject.Namespace }}-{{ .AutomationObject.Name }}`

// Template is one use of the data: its name in errors, its default text,
// and whether it renders a single line.
type Template struct {
	Name    string
	Default string
	// Line: the result is one line (titles, branch names), trimmed.
	Line bool
}

// The templates the data renders.
var (
	CommitMessage     = Template{Name: "commit message", Default: DefaultTemplate}
	PullRequestTitle  = Template{Name: "pull request title", Default: DefaultTitleTemplate, Line: true}
	PullRequestBody   = Template{Name: "pull request body", Default: DefaultBodyTemplate}
	PullRequestBranch = Template{Name: "pull request branch", Default: DefaultBranchTemplate, Line: true}
)

var templateFields = []string{"AutomationObject", "Changed", "Values"}

// parse parses text (the default when empty) with the hermetic Sprig
// functions (no environment, network or randomness) and checks that it
// refers only to fields the data has, in every branch, not only those a
// sample run takes.
func (t Template) parse(text string) (*template.Template, error) {
	if strings.TrimSpace(text) == "" {
		text = t.Default
	}
	tmpl, err := template.New(t.Name).Funcs(sprig.HermeticTxtFuncMap()).
		Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("invalid %s template: %w", t.Name, err)
	}
	for _, d := range tmpl.Templates() {
		// A {{ define }}d template can be called with any dot; only $ is
		// known to be the data there.
		if err := checkNode(d.Root, d.Name() == tmpl.Name()); err != nil {
			return nil, fmt.Errorf("invalid %s template: %w", t.Name, err)
		}
	}
	return tmpl, nil
}

// Validate checks a template: it must parse, refer only to existing
// fields, and render for an example change with the given values.
func (t Template) Validate(text string, values map[string]string) error {
	example := &setters.Result{Files: []meta.FileResult{{Path: "deploy/app.yaml", Objects: []meta.ObjectResult{{
		ObjectID: meta.ObjectID{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "app"},
		Changes:  []meta.Change{{OldValue: "app:1.0.0", NewValue: "app:1.0.1", Setter: "default:app"}},
	}}}}}
	_, err := t.Render(text, Data{
		AutomationObject: ObjectName{Namespace: "default", Name: "automation"},
		Changed:          example.V2(),
		Values:           values,
	})
	return err
}

// Render renders text (the default when empty) with data.
func (t Template) Render(text string, data Data) (string, error) {
	tmpl, err := t.parse(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("rendering the %s template: %w", t.Name, err)
	}
	out := b.String()
	if t.Line {
		out = strings.TrimSpace(out)
		if strings.ContainsAny(out, "\r\n") {
			return "", fmt.Errorf("the %s template rendered more than one line", t.Name)
		}
	}
	if strings.TrimSpace(out) == "" {
		return "", fmt.Errorf("the %s template rendered an empty text", t.Name)
	}
	return out, nil
}

// Validate checks a commit message template (CommitMessage.Validate).
func Validate(text string, values map[string]string) error {
	return CommitMessage.Validate(text, values)
}

// Render renders a commit message; an empty template means
// DefaultTemplate (CommitMessage.Render).
func Render(text string, data Data) (string, error) {
	return CommitMessage.Render(text, data)
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
