package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const podinfo = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  namespace: default
spec:
  template:
    spec:
      containers:
      - image: ghcr.io/stefanprodan/podinfo:6.0.0 # {"$imagepolicy": "apps:podinfo"}
      - image: host:5000/redis:6 # {"$imagepolicy": "apps:redis"}
`

func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, body := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersionAndUsage(t *testing.T) {
	tests := []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"version"}, 0, "tk-image dev", ""},
		{[]string{"version", "extra"}, 2, "", "unknown command"},
		{[]string{"no-such-command"}, 2, "", "unknown command"},
		{[]string{"update", "--no-such-flag"}, 2, "", "unknown flag"},
		{[]string{"update", "--dir", "."}, 2, "", "no policies"},
		{[]string{"update", "--policy", "podinfo=ghcr.io/x:1"}, 2, "", "not NAMESPACE:NAME"},
		{[]string{"update", "--policy", "apps:podinfo=ghcr.io/x"}, 2, "", "no tag"},
		{[]string{"update", "--policy", "apps:a=x:1", "--output", "yaml"}, 2, "", "--output must be"},
		{[]string{"update", "--policy", "apps:a=x:1", "--dir", "/does/not/exist"}, 2, "", "is not a directory"},
		{[]string{"update", "--policies-from", "/does/not/exist"}, 2, "", "--policies-from"},
		// Cluster commands: arguments are checked before any API call.
		{[]string{"get"}, 2, "", "requires at least 1 arg"},
		{[]string{"get", "widgets"}, 2, "", `unknown kind "widgets"`},
		{[]string{"get", "policies", "-o", "xml"}, 2, "", "--output must be"},
		{[]string{"get", "policy", "a", "b", "--watch"}, 2, "", "at most one name"},
		{[]string{"reconcile", "job", "x"}, 2, "", "want one of repository, policy, automation"},
		{[]string{"reconcile", "policy"}, 2, "", "accepts 2 arg(s)"},
		{[]string{"create", "policy", "p", "--semver", "1.x"}, 2, "", `required flag(s) "repository" not set`},
		{[]string{"create", "repository", "r", "--image", "x", "--access-from", "team"}, 2, "", `"team" is not KEY=VALUE`},
		{[]string{"create", "automation", "a", "--author-email", "a@b", "--label", "x"}, 2, "", "--label"},
		{[]string{"create", "automation", "a", "--author-email", "a@b", "--policy-selector", "a in (", "--export"}, 2, "", "--policy-selector"},
		{[]string{"create", "job", "j", "--url", "https://h/r", "--branch", "main"}, 2, "", "at least one --set"},
		{[]string{"job", "run", "--url", "https://h/r", "--branch", "main", "--container-image", "x", "--set", "a:b=x:1"}, 2, "", "give it or --set, not both"},
		{[]string{"create", "job", "j", "--url", "https://h/r", "--branch", "main", "--container-arg", "x"}, 2, "", "need --container-image"},
		{[]string{"create", "job", "j", "--url", "https://h/r", "--branch", "main", "--container-image", "x", "--container-env", "NOVALUE"}, 2, "", `"NOVALUE" is not KEY=VALUE`},
		{[]string{"job", "run", "--url", "https://h/r", "--set", "a:b=x:1"}, 2, "", "give --branch"},
		{[]string{"job", "run", "--url", "https://h/r", "--branch", "main", "--set", "a:b=x:1", "--set", "a:b=x:2"}, 2, "", "given twice"},
		{[]string{"job", "run", "--from-automation", "a", "--set", "a:b=x:1"}, 2, "", "--from-automation takes no"},
		{[]string{"job", "run", "--url", "https://h/r", "--branch", "main", "--set", "a:b=x:1", "--commit-template", "@/does/not/exist"}, 2, "", "--commit-template"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, "", tt.args...)
			if code != tt.code || !strings.Contains(out, tt.out) || !strings.Contains(errs, tt.errs) {
				t.Errorf("code %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errs, tt.code, tt.out, tt.errs)
			}
		})
	}
}

// --export prints what a user commits, with no cluster to reach: the
// object's apiVersion, kind, name, namespace, labels and spec.
func TestCreateExport(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"create", "repository", "podinfo", "-n", "apps", "--image", "ghcr.io/stefanprodan/podinfo", "--interval", "10m",
			"--secret-ref", "regcred", "--exclude", "^sha-", "--access-from", "*", "--access-from", "team=web,env=prod"}, `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata:
  name: podinfo
  namespace: apps
spec:
  accessFrom:
    namespaceSelectors:
    - {}
    - matchLabels:
        env: prod
        team: web
  exclusionList:
  - ^sha-
  image: ghcr.io/stefanprodan/podinfo
  interval: 10m0s
  provider: generic
  secretRef:
    name: regcred
`},
		{[]string{"create", "policy", "podinfo", "-n", "apps", "--repository", "images/podinfo", "--numerical", "asc",
			"--filter-pattern", "^main-(?P<ts>[0-9]+)$", "--filter-extract", "$ts", "--label", "automation=enabled"}, `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  labels:
    automation: enabled
  name: podinfo
  namespace: apps
spec:
  filterTags:
    extract: $ts
    pattern: ^main-(?P<ts>[0-9]+)$
  imageRepositoryRef:
    name: podinfo
    namespace: images
  policy:
    numerical:
      order: asc
`},
		{[]string{"create", "automation", "fleet", "-n", "apps", "--source", "flux-system/fleet", "--author-email", "bot@example.com",
			"--push-branch", "auto", "--push-option", "ci.skip=", "--path", "clusters/prod", "--policy-selector", "team=web",
			"--commit-value", "env=prod", "--signing-key-secret", "signing", "--signing-key-type", "ssh"}, `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata:
  name: fleet
  namespace: apps
spec:
  git:
    commit:
      author:
        email: bot@example.com
      messageTemplateValues:
        env: prod
      signingKey:
        secretRef:
          name: signing
        type: ssh
    push:
      branch: auto
      options:
        ci.skip: ""
  interval: 5m0s
  policySelector:
    matchLabels:
      team: web
  sourceRef:
    kind: GitRepository
    name: fleet
    namespace: flux-system
  update:
    path: clusters/prod
    strategy: Setters
`},
		// Container mode: the container instead of setters.
		{[]string{"create", "job", "bump", "-n", "apps", "--url", "https://git.example.com/fleet.git", "--branch", "main", "--path", "deploy",
			"--container-image", "busybox", "--container-command", "/bin/sh", "--container-command", "-c", "--container-arg", "echo hi",
			"--container-env", "A=b", "--container-timeout", "2m"}, `---
apiVersion: update.toolkit.dev/v1beta1
kind: UpdateJob
metadata:
  name: bump
  namespace: apps
spec:
  checkout:
    ref:
      branch: main
  commit:
    author:
      email: tk-image@localhost
      name: tk-image
  repository:
    url: https://git.example.com/fleet.git
  update:
    container:
      args:
      - echo hi
      command:
      - /bin/sh
      - -c
      env:
      - name: A
        value: b
      image: busybox
      timeout: 2m0s
    path: deploy
`},
		{[]string{"create", "job", "bump", "-n", "apps", "--url", "https://git.example.com/fleet.git", "--secret", "auth", "--branch", "main",
			"--set", "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0", "--ttl", "1h"}, `---
apiVersion: update.toolkit.dev/v1beta1
kind: UpdateJob
metadata:
  name: bump
  namespace: apps
spec:
  checkout:
    ref:
      branch: main
  commit:
    author:
      email: tk-image@localhost
      name: tk-image
  repository:
    secretRef:
      name: auth
    url: https://git.example.com/fleet.git
  ttlSecondsAfterFinished: 3600
  update:
    setters:
    - name: ghcr.io/stefanprodan/podinfo
      policy: apps:podinfo
      tag: 6.5.0
`},
	}
	for _, tt := range tests {
		t.Run(tt.args[1], func(t *testing.T) {
			code, out, errs := runCLI(t, "", append(tt.args, "--export")...)
			if code != 0 || out != tt.want {
				t.Errorf("code %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errs, out, tt.want)
			}
		})
	}
}

func TestUpdateJSON(t *testing.T) {
	dir := tree(t, map[string]string{"deploy/app.yaml": podinfo, "other.yaml": "a: b\n"})
	code, out, errs := runCLI(t, "", "update", "--dir", dir, "--output", "json",
		"--policy", "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0",
		"--policy", "apps:redis=host:5000/redis:7.2@sha256:2d9a00b3981628a533ff43352193b1838b0a4bf6b0033444286f563205e51a2c")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
	want := `{"files":[{"path":"deploy/app.yaml","objects":[{"apiVersion":"apps/v1","kind":"Deployment","namespace":"default","name":"app","changes":[` +
		`{"oldValue":"ghcr.io/stefanprodan/podinfo:6.0.0","newValue":"ghcr.io/stefanprodan/podinfo:6.5.0","setter":"apps:podinfo"},` +
		`{"oldValue":"host:5000/redis:6","newValue":"host:5000/redis:7.2@sha256:2d9a00b3981628a533ff43352193b1838b0a4bf6b0033444286f563205e51a2c","setter":"apps:redis"}]}]}]}` + "\n"
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "deploy/app.yaml"))
	if !strings.Contains(string(b), "podinfo:6.5.0 # {") {
		t.Errorf("file not rewritten:\n%s", b)
	}

	// Nothing left to change: an empty list, exit 0.
	code, out, _ = runCLI(t, "", "update", "--dir", dir, "-o", "json", "--policy", "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0")
	if code != 0 || out != `{"files":[]}`+"\n" {
		t.Errorf("second run: code %d, stdout %q", code, out)
	}
}

func TestUpdateTextDryRunAndPoliciesFrom(t *testing.T) {
	dir := tree(t, map[string]string{"app.yaml": podinfo})
	policies := filepath.Join(t.TempDir(), "policies.yaml")
	// kubectl get imagepolicy -A -o yaml output, plus a second document.
	list := `apiVersion: v1
kind: List
items:
- apiVersion: image.toolkit.dev/v1beta1
  kind: ImagePolicy
  metadata: {name: podinfo, namespace: apps}
  status:
    latestRef: {name: ghcr.io/stefanprodan/podinfo, tag: 6.5.0}
- apiVersion: image.toolkit.dev/v1beta1
  kind: ImagePolicy
  metadata: {name: pending, namespace: apps}
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata: {name: redis, namespace: apps}
status:
  latestRef: {name: host:5000/redis, tag: "7.2"}
`
	if err := os.WriteFile(policies, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "update", "--dir", dir, "--policies-from", policies, "--dry-run")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
	want := "app.yaml\n  Deployment/default/app\n" +
		"    ghcr.io/stefanprodan/podinfo:6.0.0 -> ghcr.io/stefanprodan/podinfo:6.5.0 (apps:podinfo)\n" +
		"    host:5000/redis:6 -> host:5000/redis:7.2 (apps:redis)\n(dry run: no files written)\n"
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	if !strings.Contains(errs, "apps/pending has no status.latestRef") {
		t.Errorf("stderr %q lacks the skipped policy", errs)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "app.yaml")); string(b) != podinfo {
		t.Error("dry run wrote the file")
	}
}

func TestUpdateReportsProblemFiles(t *testing.T) {
	dir := tree(t, map[string]string{
		"good.yaml":   podinfo,
		"broken.yaml": "a: b # {\"$imagepolicy\": \"apps:podinfo\"}\n  c: [\n",
	})
	code, out, errs := runCLI(t, "", "update", "--dir", dir, "--policy", "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0")
	if code != 1 {
		t.Errorf("code %d, want 1", code)
	}
	if !strings.Contains(errs, "broken.yaml: yaml:") || !strings.HasPrefix(out, "good.yaml\n") {
		t.Errorf("stdout %q, stderr %q", out, errs)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "good.yaml")); !strings.Contains(string(b), "6.5.0") {
		t.Error("the good file was not updated")
	}
}

func TestKRMFunction(t *testing.T) {
	in := `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: app
    namespace: default
    annotations:
      internal.config.kubernetes.io/path: deploy/app.yaml
  spec:
    image: ghcr.io/stefanprodan/podinfo:6.0.0 # {"$imagepolicy": "apps:podinfo"}
    # {"$imagepolicy": "apps:podinfo:tag"}
    tag: v1
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: policies
  data:
    apps:podinfo: ghcr.io/stefanprodan/podinfo:6.5.0
`
	code, out, errs := runCLI(t, in, "update", "--krm")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		`image: ghcr.io/stefanprodan/podinfo:6.5.0 # {"$imagepolicy": "apps:podinfo"}`,
		`tag: 6.5.0`,
		`message: ghcr.io/stefanprodan/podinfo:6.0.0 -> ghcr.io/stefanprodan/podinfo:6.5.0 (apps:podinfo)`,
		`path: deploy/app.yaml`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	if strings.Contains(out, "severity: warning") {
		t.Errorf("a warning with markers present:\n%s", out)
	}
	// Without any marker (as under kustomize build, which strips
	// comments) the function says so in a warning, and changes nothing.
	stripped := regexp.MustCompile(` *# \{"\$imagepolicy[^\n]*`).ReplaceAllString(in, "")
	code, out, errs = runCLI(t, stripped, "update", "--krm")
	if code != 0 || !strings.Contains(out, "severity: warning") || !strings.Contains(out, "kustomize build removes comments") ||
		!strings.Contains(out, "image: ghcr.io/stefanprodan/podinfo:6.0.0") {
		t.Errorf("no markers: code %d, stderr %q, stdout:\n%s", code, errs, out)
	}

	bad := strings.Replace(in, "ghcr.io/stefanprodan/podinfo:6.5.0\n", "no-tag\n", 1)
	if code, _, _ := runCLI(t, bad, "update", "--krm"); code != 1 {
		t.Errorf("bad functionConfig: code %d, want 1", code)
	}
}
