package commitmsg

import (
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// seedResult is the example of Flux's setters.ResultV2 proposal (seed 003).
func seedResult() *setters.Result {
	dep := func(name string) meta.ObjectID {
		return meta.ObjectID{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: name}
	}
	return &setters.Result{Files: []meta.FileResult{
		{Path: "foo-deployment.yaml", Objects: []meta.ObjectResult{
			{ObjectID: dep("foo"), Changes: []meta.Change{{OldValue: "2.2.2", NewValue: "5.0.3", Setter: "default:foo:tag"}}},
		}},
		{Path: "podinfo-deployment.yaml", Objects: []meta.ObjectResult{
			{ObjectID: dep("podinfo"), Changes: []meta.Change{
				{OldValue: "ghcr.io/stefanprodan/podinfo:4.0.6", NewValue: "ghcr.io/stefanprodan/podinfo:5.0.3", Setter: "default:podinfo"},
				{OldValue: "bar", NewValue: "ghcr.io/stefanprodan/podinfo", Setter: "default:podinfo:name"},
				{OldValue: "4.0.6", NewValue: "5.0.3", Setter: "default:podinfo:tag"},
			}},
			{ObjectID: dep("infopod"), Changes: []meta.Change{{OldValue: "v1.0", NewValue: "5.0.3", Setter: "default:podinfo:tag"}}},
		}},
	}}
}

// The template from Flux's documentation, as a migrating user brings it.
const fluxTemplate = `Automation: {{ .AutomationObject }}
{{ range $filename, $objects := .Changed.FileChanges }}
- File: {{ $filename }}
{{- range $resource, $changes := $objects }}
  - Object: {{ $resource.Kind }}/{{ $resource.Namespace }}/{{ $resource.Name }}
    Changes:
{{- range $_, $change := $changes }}
    - {{ $change.OldValue }} -> {{ $change.NewValue }}
{{- end }}
{{- end }}
{{ end -}}
`

const seedMessage = `Automation: default/test-update-auto

- File: foo-deployment.yaml
  - Object: Deployment/default/foo
    Changes:
    - 2.2.2 -> 5.0.3

- File: podinfo-deployment.yaml
  - Object: Deployment/default/infopod
    Changes:
    - v1.0 -> 5.0.3
  - Object: Deployment/default/podinfo
    Changes:
    - ghcr.io/stefanprodan/podinfo:4.0.6 -> ghcr.io/stefanprodan/podinfo:5.0.3
    - bar -> ghcr.io/stefanprodan/podinfo
    - 4.0.6 -> 5.0.3
`

func seedData() Data {
	return Data{
		AutomationObject: ObjectName{Namespace: "default", Name: "test-update-auto"},
		Changed:          seedResult().V2(),
		Values:           map[string]string{"env": "prod"},
	}
}

func TestRenderSeedExample(t *testing.T) {
	got, err := Render(fluxTemplate, seedData())
	if err != nil {
		t.Fatal(err)
	}
	if got != seedMessage {
		t.Errorf("got:\n%s\nwant:\n%s", got, seedMessage)
	}
}

func TestRenderTemplates(t *testing.T) {
	tests := []struct {
		name, tmpl, want string
	}{
		{"default", "", "Update images (default/test-update-auto)\n\n- File: foo-deployment.yaml\n  - Object: Deployment/default/foo\n    Changes:\n    - 2.2.2 -> 5.0.3\n"},
		{"values and sprig", `{{ .Values.env | upper }}: {{ len .Changed.Changes }} changes`, "PROD: 5 changes"},
		{"objects merged", `{{ range $o, $c := .Changed.Objects }}{{ $o.Name }}={{ len $c }} {{ end }}`, "foo=1 infopod=1 podinfo=3 "},
		{"changes in order", `{{ range .Changed.Changes }}{{ .Setter }};{{ end }}`,
			"default:foo:tag;default:podinfo;default:podinfo:name;default:podinfo:tag;default:podinfo:tag;"},
		{"missing value is empty", `x{{ .Values.nope }}y`, "xy"},
		{"defined template", `{{ define "obj" }}{{ .Kind }}{{ end }}{{ range $o, $c := .Changed.Objects }}{{ template "obj" $o }} {{ end }}`,
			"Deployment Deployment Deployment "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Render(tt.tmpl, seedData())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("got %q, want prefix %q", got, tt.want)
			}
		})
	}
}

func TestValidateTemplateRejects(t *testing.T) {
	tests := []struct {
		name, tmpl, want string
	}{
		{"Flux's removed .Updated", `{{ range .Updated.Images }}{{ . }}{{ end }}`, ".Updated, which does not exist: Flux removed it"},
		{".Updated in a branch never taken", `{{ if false }}{{ .Updated }}{{ end }}ok`, ".Updated"},
		{"$.Updated inside a range", `{{ range .Changed.Changes }}{{ $.Updated }}{{ end }}ok`, ".Updated"},
		{"unknown top-level field", `{{ .Automation }}`, ".Automation, which does not exist"},
		{"unknown nested field", `{{ .Changed.Files }}`, "can't evaluate field Files"},
		{"parse error", `{{ range .Changed.Changes }}`, "invalid commit message template"},
		{"non-hermetic function", `{{ env "HOME" }}`, `function "env" not defined`},
		{"empty message", `{{ "" }}`, "rendered an empty text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.tmpl, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
	// Fields of elements inside range are not the data's and are allowed.
	if err := Validate(`{{ range .Changed.Changes }}{{ .OldValue }}{{ end }}`, nil); err != nil {
		t.Errorf("valid template rejected: %v", err)
	}
}

// The pull request templates' defaults name the policies and their new
// tags in the title, tabulate every change in the body, and name the
// automation's stream in the branch; a custom title must be one line.
func TestPullRequestDefaults(t *testing.T) {
	data := seedData()
	title, err := PullRequestTitle.Render("", data)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Update foo to 5.0.3, podinfo to 5.0.3"; title != want {
		t.Errorf("title = %q, want %q", title, want)
	}
	body, err := PullRequestBody.Render("", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| foo-deployment.yaml | Deployment/foo | `2.2.2` | `5.0.3` |",
		"| podinfo-deployment.yaml | Deployment/podinfo | `ghcr.io/stefanprodan/podinfo:4.0.6` | `ghcr.io/stefanprodan/podinfo:5.0.3` |",
		"| podinfo-deployment.yaml | Deployment/infopod | `v1.0` | `5.0.3` |",
		"from ImageUpdateAutomation default/test-update-auto",
	} {
		if !strings.Contains(body, row) {
			t.Errorf("body lacks %q:\n%s", row, body)
		}
	}
	branch, err := PullRequestBranch.Render("", data)
	if err != nil || branch != "image-toolkit/default-test-update-auto" {
		t.Errorf("branch = %q, %v", branch, err)
	}

	tests := []struct {
		name    string
		changes []meta.Change
		want    string
	}{
		{"digest left out", []meta.Change{{NewValue: "reg:5000/app:1.2.3@sha256:abc", Setter: "ns:app"}}, "Update app to 1.2.3"},
		{"name marker alone", []meta.Change{{NewValue: "reg/app", Setter: "ns:app:name"}}, "Update images"},
		{"more than three", []meta.Change{
			{NewValue: "1", Setter: "ns:a:tag"}, {NewValue: "2", Setter: "ns:b:tag"},
			{NewValue: "3", Setter: "ns:c:tag"}, {NewValue: "4", Setter: "ns:d:tag"},
		}, "Update 4 images"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &setters.Result{Files: []meta.FileResult{{Path: "a.yaml", Objects: []meta.ObjectResult{{Changes: tt.changes}}}}}
			got, err := PullRequestTitle.Render("", Data{Changed: r.V2()})
			if err != nil || got != tt.want {
				t.Errorf("title = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := PullRequestTitle.Render("a\nb", data); err == nil || !strings.Contains(err.Error(), "more than one line") {
		t.Errorf("two-line title: err = %v", err)
	}
}

// The default message and request body list the source revisions the
// changes bring, once each however many values an image sets, with the
// compare page when there is one; without sources they say nothing of
// them.
func TestDefaultsListTheSourceChanges(t *testing.T) {
	src := &meta.ChangeSource{URL: "https://github.com/acme/api", Revision: "bbbbbbb", PreviousRevision: "aaaaaaa",
		CompareURL: "https://github.com/acme/api/compare/aaaaaaa...bbbbbbb",
		Commits:    []meta.SourceCommit{{SHA: "1111111111111111", Subject: "feat: one"}, {SHA: "2222222222222222", Subject: `fix: \*two\*`}}, TotalCommits: 60}
	only := &meta.ChangeSource{URL: "https://gitlab.com/acme/web", Revision: "ccccccc"}
	r := &setters.Result{Files: []meta.FileResult{{Path: "a.yaml", Objects: []meta.ObjectResult{{Changes: []meta.Change{
		{OldValue: "api:1", NewValue: "api:2", Setter: "default:api", Source: src},
		{OldValue: "api:1", NewValue: "api:2", Setter: "default:api", Source: src},
		{OldValue: "web:1", NewValue: "web:2", Setter: "default:web", Source: only},
	}}}}}}
	msg, err := Render("", Data{Changed: r.V2()})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Source changes:\n- https://github.com/acme/api aaaaaaa..bbbbbbb: https://github.com/acme/api/compare/aaaaaaa...bbbbbbb\n- https://gitlab.com/acme/web ccccccc\n"; !strings.HasSuffix(msg, want) {
		t.Errorf("message:\n%s\nwant it to end in\n%s", msg, want)
	}
	body, err := PullRequestBody.Render("", Data{Changed: r.V2()})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Source changes:\n\n- https://github.com/acme/api: `aaaaaaa` to `bbbbbbb` (https://github.com/acme/api/compare/aaaaaaa...bbbbbbb)\n" +
		"  - `111111111111` feat: one\n  - `222222222222` fix: \\*two\\*\n  - and 58 more\n" +
		"- https://gitlab.com/acme/web: `ccccccc`\n\nThis request"; !strings.Contains(body, want) {
		t.Errorf("body:\n%s\nwant\n%s", body, want)
	}
	plain := &setters.Result{Files: []meta.FileResult{{Path: "a.yaml", Objects: []meta.ObjectResult{{Changes: []meta.Change{{OldValue: "a:1", NewValue: "a:2", Setter: "default:a"}}}}}}}
	for _, tmpl := range []Template{CommitMessage, PullRequestBody} {
		if out, err := tmpl.Render("", Data{Changed: plain.V2()}); err != nil || strings.Contains(out, "Source") {
			t.Errorf("%s without sources: %q, %v", tmpl.Name, out, err)
		}
	}
}

// The pull request of an approved promotion names who approved which
// digest; one without approvals says nothing of them.
func TestTheBodyNamesWhoApproved(t *testing.T) {
	a := &meta.Approval{Digest: "sha256:2222", By: "alice@example.com"}
	r := &setters.Result{Files: []meta.FileResult{{Path: "a.yaml", Objects: []meta.ObjectResult{{Changes: []meta.Change{
		{OldValue: "api:1", NewValue: "api:2", Setter: "prod:api", Approval: a},
		{OldValue: "api:1", NewValue: "api:2", Setter: "prod:api:tag", Approval: a},
		{OldValue: "web:1", NewValue: "web:2", Setter: "prod:web"},
	}}}}}}
	body, err := PullRequestBody.Render("", Data{Changed: r.V2()})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Approved for promotion:\n\n- `sha256:2222` by `alice@example.com`\n\nThis request"; !strings.Contains(body, want) {
		t.Errorf("body:\n%s\nwant\n%s", body, want)
	}
	plain := &setters.Result{Files: []meta.FileResult{{Path: "a.yaml", Objects: []meta.ObjectResult{{Changes: []meta.Change{{OldValue: "a:1", NewValue: "a:2", Setter: "default:a"}}}}}}}
	if out, err := PullRequestBody.Render("", Data{Changed: plain.V2()}); err != nil || strings.Contains(out, "Approved") {
		t.Errorf("without approvals: %q, %v", out, err)
	}
}
