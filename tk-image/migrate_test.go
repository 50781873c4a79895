package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// Set TK_IMAGE_UPDATE_GOLDEN=1 to rewrite testdata/migrate/golden from the
// current output (then review the diff).
var updateMigrateGolden = os.Getenv("TK_IMAGE_UPDATE_GOLDEN") != ""

// warningRE picks the object and field out of a warning line.
var warningRE = regexp.MustCompile(`^warning: ([A-Za-z]+ [^:]+): ([^:]+):`)

// warnedFields returns "Kind ns/name: field" for every warning on stderr,
// and fails the test on any stderr line that is neither a warning nor a
// note.
func warnedFields(t *testing.T, stderr string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if line == "" || strings.HasPrefix(line, "note: ") {
			continue
		}
		m := warningRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("stderr line is not a warning naming an object and a field: %q", line)
			continue
		}
		out = append(out, m[1]+": "+m[2])
	}
	return out
}

func expectWarnings(t *testing.T, stderr string, want []string) {
	t.Helper()
	got := warnedFields(t, stderr)
	if !slices.Equal(got, want) {
		t.Errorf("warnings about\n  %s\nwant\n  %s\nstderr:\n%s", strings.Join(got, "\n  "), strings.Join(want, "\n  "), stderr)
	}
}

// ourObject returns an empty object of our Go type for kind.
func ourObject(t *testing.T, kind string) any {
	t.Helper()
	switch kind {
	case imagev1.ImageRepositoryKind:
		return &imagev1.ImageRepository{}
	case imagev1.ImagePolicyKind:
		return &imagev1.ImagePolicy{}
	case imagev1.ImageUpdateAutomationKind:
		return &imagev1.ImageUpdateAutomation{}
	}
	t.Fatalf("no image-toolkit type for kind %q", kind)
	return nil
}

// decodeStrictly decodes every image-toolkit document of a multi-document
// YAML output into our Go types, failing on any field they lack, and
// returns the kinds in order.
func decodeStrictly(t *testing.T, out string) []string {
	t.Helper()
	var kinds []string
	for _, doc := range strings.Split(out, "\n---\n") {
		var tm metav1.TypeMeta
		if err := sigsyaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("output document does not parse: %v\n%s", err, doc)
		}
		if !strings.HasPrefix(tm.APIVersion, imagev1.GroupVersion.Group+"/") {
			continue
		}
		if tm.APIVersion != imagev1.GroupVersion.String() {
			t.Errorf("apiVersion %s, want %s", tm.APIVersion, imagev1.GroupVersion)
		}
		obj := ourObject(t, tm.Kind)
		if err := sigsyaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("output does not decode strictly into our %s: %v\n%s", tm.Kind, err, doc)
		}
		kinds = append(kinds, tm.Kind)
	}
	return kinds
}

// migrateGolden migrates input and checks the output against
// testdata/migrate/golden/<golden>, that it decodes strictly into kinds of
// our objects, and the warnings; it returns the output.
func migrateGolden(t *testing.T, input, golden string, kinds int, warnings []string) string {
	t.Helper()
	code, out, errs := runCLI(t, "", "migrate", "-f", input)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errs)
	}
	golden = filepath.Join("testdata", "migrate", "golden", golden)
	if updateMigrateGolden {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", golden, out, want)
	}
	if got := decodeStrictly(t, out); len(got) != kinds {
		t.Errorf("%d objects converted, want %d", len(got), kinds)
	}
	expectWarnings(t, errs, warnings)
	return out
}

func TestMigrateFluxExamples(t *testing.T) {
	// Proves that Flux's manifests of every kind and API version, covering
	// every field of Flux's API, convert to the golden output, that the output
	// decodes strictly into our Go types, and that every warning names the
	// object and field it is about.
	tests := []struct {
		file     string
		kinds    int
		warnings []string
	}{
		{"imagerepository-v1.yaml", 3, []string{
			"ImageRepository apps/podinfo: spec.certSecretRef",
			"ImageRepository apps/cache: spec.insecure",
		}},
		{"imagerepository-v1beta2.yaml", 1, []string{
			"ImageRepository flux-system/podinfo: spec.certSecretRef",
			"ImageRepository flux-system/podinfo: spec.serviceAccountName",
		}},
		{"imagerepository-v1beta1.yaml", 1, []string{
			"ImageRepository flux-system/podinfo: spec.timeout",
			"ImageRepository flux-system/podinfo: spec.certSecretRef",
		}},
		{"imagepolicy-v1.yaml", 3, []string{
			"ImagePolicy apps/podinfo-build: spec.policy.numerical",
		}},
		{"imagepolicy-v1beta2.yaml", 2, []string{
			"ImagePolicy flux-system/podinfo: spec.interval",
			"ImagePolicy flux-system/redis: spec.interval",
		}},
		{"imagepolicy-v1beta1.yaml", 2, []string{
			"ImagePolicy flux-system/nightly: spec.policy.numerical",
		}},
		{"imageupdateautomation-v1.yaml", 1, []string{
			"ImageUpdateAutomation flux-system/fleet: spec.git.push.options",
		}},
		{"imageupdateautomation-v1beta2.yaml", 1, []string{
			"ImageUpdateAutomation apps/apps: spec.sourceRef.namespace",
			"ImageUpdateAutomation apps/apps: spec.git.commit.messageTemplate",
			"ImageUpdateAutomation apps/apps: spec.git.push.refspec",
			"ImageUpdateAutomation apps/apps: spec.update.path",
		}},
		{"imageupdateautomation-v1beta1.yaml", 1, []string{
			"ImageUpdateAutomation flux-system/flux-system: spec.git.commit.messageTemplate",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			migrateGolden(t, filepath.Join("testdata", "migrate", "flux", tc.file), tc.file, tc.kinds, tc.warnings)
		})
	}

	t.Run("json", func(t *testing.T) {
		// The same examples, a directory at once, as a JSON List whose
		// items decode strictly (DisallowUnknownFields) into our types.
		code, out, errs := runCLI(t, "", "migrate", "-f", filepath.Join("testdata", "migrate", "flux"), "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, errs)
		}
		var list struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Items      []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		if list.APIVersion != "v1" || list.Kind != "List" || len(list.Items) != 15 {
			t.Fatalf("got a %s %s of %d items, want a v1 List of 15", list.APIVersion, list.Kind, len(list.Items))
		}
		for _, it := range list.Items {
			var tm metav1.TypeMeta
			if err := json.Unmarshal(it, &tm); err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(strings.NewReader(string(it)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(ourObject(t, tm.Kind)); err != nil {
				t.Errorf("item does not decode strictly into our %s: %v\n%s", tm.Kind, err, it)
			}
		}
	})
}

func TestMigrateAdjustments(t *testing.T) {
	// Proves how migrate handles each difference between Flux's API and
	// ours that the examples do not: what it rewrites, keeps or drops, and
	// which object and field each warning names.
	tests := []struct {
		name     string
		input    string
		warnings []string
		want     []string // substrings of the output
		notWant  []string
	}{
		{
			name: "several policies: Flux's first is kept",
			input: `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata: {name: p, namespace: ns}
spec:
  imageRepositoryRef: {name: r}
  policy:
    alphabetical: {order: asc}
    semver: {range: 1.x}
`,
			warnings: []string{"ImagePolicy ns/p: spec.policy.alphabetical"},
			want:     []string{"semver:\n      range: 1.x"},
			notWant:  []string{"alphabetical"},
		},
		{
			name: "invalid range and pattern, extract without pattern",
			input: `apiVersion: image.toolkit.fluxcd.io/v1beta2
kind: ImagePolicy
metadata: {name: p, namespace: ns}
spec:
  imageRepositoryRef: {name: r}
  policy: {semver: {range: "not a range"}}
  filterTags: {extract: $ts}
---
apiVersion: image.toolkit.fluxcd.io/v1beta2
kind: ImagePolicy
metadata: {name: q, namespace: ns}
spec:
  imageRepositoryRef: {name: r}
  policy: {numerical: {}}
  filterTags: {pattern: "^(unclosed"}
`,
			warnings: []string{
				"ImagePolicy ns/p: spec.policy.semver.range",
				"ImagePolicy ns/p: spec.filterTags.extract",
				"ImagePolicy ns/q: spec.policy.numerical",
				"ImagePolicy ns/q: spec.filterTags.pattern",
			},
			notWant: []string{"extract"},
		},
		{
			name: "a regex+numerical recipe for a Docker-style tag becomes docker",
			input: `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata: {name: redis, namespace: ns}
spec:
  imageRepositoryRef: {name: redis}
  filterTags: {pattern: '^7\.(?P<minor>[0-9]+)-alpine$', extract: $minor}
  policy: {numerical: {order: asc}}
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata: {name: build, namespace: ns}
spec:
  imageRepositoryRef: {name: app}
  filterTags: {pattern: '^main-[a-f0-9]+-(?P<ts>[0-9]+)$', extract: $ts}
  policy: {numerical: {order: asc}}
`,
			warnings: []string{
				"ImagePolicy ns/redis: spec.policy.numerical",
				"ImagePolicy ns/build: spec.policy.numerical",
			},
			want: []string{"docker:\n      compatibleWith: 7.0-alpine\n      range: '>=7 <8'", "numerical:\n      order: asc", "extract: $ts"},
		},
		{
			name: "unknown fields are dropped, metadata trimmed",
			input: `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: r
  namespace: ns
  finalizers: [finalizers.fluxcd.io, example.com/keep]
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: "1"}]
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    reconcile.fluxcd.io/requestedAt: now
extra: true
spec:
  image: ghcr.io/org/app
  interval: 5m
  exclusionList: []
  futureField: {a: 1}
  accessFrom:
    namespaceSelectors: [{matchLabels: {a: b}, matchExpressions: []}]
`,
			warnings: []string{
				"ImageRepository ns/r: metadata.finalizers",
				"ImageRepository ns/r: metadata.ownerReferences",
				"ImageRepository ns/r: spec.accessFrom.namespaceSelectors[0].matchExpressions",
				"ImageRepository ns/r: spec.futureField",
				"ImageRepository ns/r: extra",
			},
			notWant: []string{"finalizers", "ownerReferences", "annotations", "extra", "futureField", "exclusionList", "matchExpressions"},
		},
		{
			name: "image with a tag, timeout in hours",
			input: `apiVersion: image.toolkit.fluxcd.io/v1beta1
kind: ImageRepository
metadata: {name: r}
spec: {image: "ghcr.io/org/app:1.0", interval: 2h, timeout: 90s}
`,
			warnings: []string{"ImageRepository r: spec.image"},
			want:     []string{"interval: 2h", "timeout: 90s"},
		},
		{
			name: "refspecs, checkout without a branch, paths, selectors",
			input: `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageUpdateAutomation
metadata: {name: a, namespace: ns}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  git:
    checkout: {ref: {branch: main}}
    commit: {author: {email: bot@example.com}}
    push: {refspec: "main:refs/heads/auto"}
  interval: 5m
  update: {path: "./apps/../clusters/prod"}
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageUpdateAutomation
metadata: {name: b, namespace: ns}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  git:
    checkout: {ref: {commit: 0123abc}}
    commit: {author: {email: bot@example.com}}
  interval: 5m
  policySelector:
    matchExpressions: [{key: app, operator: Sometimes, values: [x]}]
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageUpdateAutomation
metadata: {name: c, namespace: ns}
spec:
  sourceRef: {apiVersion: example.com/v1, kind: GitRepository, name: repo}
  git:
    commit: {author: {email: bot@example.com}, messageTemplate: "{{ .Commit }}"}
    push: {refspec: "refs/heads/other:refs/heads/auto"}
  interval: 5m
  update: {}
`,
			warnings: []string{
				"ImageUpdateAutomation ns/a: spec.update.path",
				"ImageUpdateAutomation ns/b: spec.git.checkout.ref",
				"ImageUpdateAutomation ns/b: spec.policySelector",
				"ImageUpdateAutomation ns/c: spec.sourceRef.apiVersion",
				"ImageUpdateAutomation ns/c: spec.git.commit.messageTemplate",
				"ImageUpdateAutomation ns/c: spec.git.push.refspec",
			},
			want: []string{"refspec: main:refs/heads/auto", "path: clusters/prod", "update:\n    strategy: Setters"},
		},
		{
			name: "a GitRepository in the input with a provider: passed through, no warning",
			input: `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: ns}
spec: {url: "https://github.com/org/repo", provider: github}
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageUpdateAutomation
metadata: {name: a, namespace: ns}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  git: {commit: {author: {email: bot@example.com}}}
  interval: 5m
`,
			warnings: nil,
			want:     []string{"provider: github", "kind: GitRepository"},
		},
		{
			name: "a List of Flux objects and others; a typed list",
			input: `apiVersion: v1
kind: List
items:
- apiVersion: image.toolkit.fluxcd.io/v1
  kind: ImageRepository
  metadata: {name: r, namespace: ns}
  spec: {image: ghcr.io/org/app, interval: 5m}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: cm}
  data: {replicas: "3"}
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicyList
items:
- metadata: {name: p, namespace: ns}
  spec: {imageRepositoryRef: {name: r}, policy: {semver: {range: 1.x}}}
`,
			want:    []string{"kind: ImageRepository", "kind: ConfigMap", "kind: ImagePolicy\n"},
			notWant: []string{"kind: List", "ImagePolicyList"},
		},
		{
			name: "the same object twice",
			input: `apiVersion: image.toolkit.fluxcd.io/v1beta2
kind: ImagePolicy
metadata: {name: p, namespace: ns}
spec: {imageRepositoryRef: {name: r}, policy: {semver: {range: 1.x}}}
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata: {name: p, namespace: ns}
spec: {imageRepositoryRef: {name: r}, policy: {semver: {range: 2.x}}}
`,
			warnings: []string{"ImagePolicy ns/p: defined twice, in <stdin>"},
			want:     []string{"range: 1.x", "range: 2.x"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, tc.input, "migrate")
			if code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, errs)
			}
			decodeStrictly(t, out)
			expectWarnings(t, errs, tc.warnings)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestMigratePassThrough(t *testing.T) {
	// Proves that the other documents of the input are written unchanged and
	// in place (comments and markers included), that directories are walked
	// for YAML and JSON but not into hidden directories, and that
	// --only-converted leaves the other documents out.
	deployment := `# The app; its marker needs no change.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: apps
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.5.0 # {"$imagepolicy": "apps:podinfo"}
`
	policy := `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: podinfo
  namespace: apps
spec:
  imageRepositoryRef:
    name: podinfo
  policy:
    semver:
      range: 6.x
`
	dir := tree(t, map[string]string{
		"apps/podinfo.yaml":          deployment + "---\n" + policy,
		"apps/kustomization.yml":     "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- podinfo.yaml\n",
		"apps/config.json":           `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}`,
		"apps/README.md":             "not a manifest\n",
		".github/workflows/ci.yml":   "on: push\n",
		"apps/.hidden/ignored.yaml":  "kind: Nope\n",
		"apps/zz-fluxrepo/repo.yaml": "apiVersion: image.toolkit.fluxcd.io/v1\nkind: ImageRepository\nmetadata: {name: podinfo, namespace: apps}\nspec: {image: ghcr.io/stefanprodan/podinfo, interval: 5m}\n",
	})
	wantPolicy := `apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: podinfo
  namespace: apps
spec:
  imageRepositoryRef:
    name: podinfo
  policy:
    semver:
      range: 6.x
`
	wantRepo := `apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata:
  name: podinfo
  namespace: apps
spec:
  image: ghcr.io/stefanprodan/podinfo
  interval: 5m
`
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"whole directory", []string{"-f", dir}, `apiVersion: v1
data:
  a: "1"
kind: ConfigMap
metadata:
  name: c
---
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- podinfo.yaml
---
` + deployment + "---\n" + wantPolicy + "---\n" + wantRepo},
		{"only converted", []string{"-f", dir, "--only-converted"}, wantPolicy + "---\n" + wantRepo},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, "", append([]string{"migrate"}, tc.args...)...)
			if code != 0 || errs != "" {
				t.Fatalf("exit %d, stderr:\n%s", code, errs)
			}
			if out != tc.want {
				t.Errorf("got\n%s\nwant\n%s", out, tc.want)
			}
		})
	}

	t.Run("stdin", func(t *testing.T) {
		// Piped input (e.g. kustomize build) with no -f is read from stdin.
		code, out, errs := runCLI(t, deployment+"---\n"+policy, "migrate")
		if code != 0 || out != deployment+"---\n"+wantPolicy || errs != "" {
			t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, errs)
		}
	})

	t.Run("nothing to convert", func(t *testing.T) {
		// Input without Flux objects passes through, with a note.
		code, out, errs := runCLI(t, deployment, "migrate")
		if code != 0 || out != deployment || !strings.Contains(errs, "note: the input has no image.toolkit.fluxcd.io objects") {
			t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, errs)
		}
	})
}

func TestMigrateErrors(t *testing.T) {
	// Proves that input that does not parse, or an object that cannot be
	// converted, exits 1 naming the file, the document and the field, with
	// nothing on stdout; and that bad flags exit 2.
	bad := tree(t, map[string]string{
		"flux.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\n\napiVersion: image.toolkit.fluxcd.io/v1\nkind: ImagePolicy\nmetadata: {name: p\n",
	})
	badFile := filepath.Join(bad, "flux.yaml")
	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
		errs  []string
	}{
		{name: "YAML that does not parse", args: []string{"-f", badFile}, code: 1,
			errs: []string{badFile + ": document 2 (line 6): not valid YAML", "1 document could not be migrated; nothing written"}},
		{name: "JSON that does not parse", stdin: `{"apiVersion": "image.toolkit.fluxcd.io/v1",`, code: 1,
			errs: []string{"<stdin>: document 1: not valid JSON"}},
		{name: "missing required fields", code: 1, stdin: `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata: {name: r, namespace: ns}
spec: {interval: 5m}
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageUpdateAutomation
metadata: {name: a, namespace: ns}
spec: {sourceRef: {kind: GitRepository, name: repo}, interval: 5m}
`,
			errs: []string{
				"<stdin>: document 1 (line 1): ImageRepository ns/r: spec.image: is required",
				"<stdin>: document 2 (line 6): ImageUpdateAutomation ns/a: spec.git: is required",
				"2 documents could not be migrated",
			}},
		{name: "wrong types and values", code: 1, stdin: `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata: {name: p}
spec:
  imageRepositoryRef: {name: r}
  policy: {numerical: {order: up}}
  interval: 5
  suspend: "yes"
`,
			errs: []string{
				"ImagePolicy p: spec.policy.numerical.order: \"up\" is not asc or desc",
				"ImagePolicy p: spec.interval: want a string, got the number 5",
				"ImagePolicy p: spec.suspend: want true or false",
			}},
		{name: "a path leaving the repository", code: 1, stdin: `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageUpdateAutomation
metadata: {name: a}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  git: {commit: {author: {email: bot@example.com}}}
  interval: 5m
  update: {path: ../elsewhere}
`, errs: []string{"ImageUpdateAutomation a: spec.update.path: \"../elsewhere\" leaves the repository"}},
		{name: "a version migrate does not read", code: 1,
			stdin: "apiVersion: image.toolkit.fluxcd.io/v1alpha2\nkind: ImagePolicy\nmetadata: {name: p}\nspec: {}\n",
			errs:  []string{"ImagePolicy p: apiVersion: image.toolkit.fluxcd.io/v1alpha2 is not a version migrate reads"}},
		{name: "a kind without equivalent", code: 1,
			stdin: "apiVersion: image.toolkit.fluxcd.io/v1\nkind: ImageSomething\nmetadata: {name: x}\nspec: {}\n",
			errs:  []string{"ImageSomething x: kind: \"ImageSomething\" has no image-toolkit equivalent"}},

		{name: "-A without --from-cluster", args: []string{"-A"}, code: 2, errs: []string{"-n and -A choose the namespaces --from-cluster reads"}},
		{name: "-n without --from-cluster", args: []string{"-n", "apps"}, code: 2, errs: []string{"-n and -A choose the namespaces"}},
		{name: "-f with --from-cluster", args: []string{"--from-cluster", "-f", badFile}, code: 2, errs: []string{"it takes no -f"}},
		{name: "-A with -n", args: []string{"--from-cluster", "-A", "-n", "apps"}, code: 2, errs: []string{"-A and -n exclude each other"}},
		{name: "unknown output", args: []string{"-o", "xml"}, code: 2, errs: []string{"--output must be yaml or json"}},
		{name: "missing file", args: []string{"-f", filepath.Join(bad, "nope.yaml")}, code: 2, errs: []string{"nope.yaml: no such file or directory"}},
		{name: "stdin twice", args: []string{"-f", "-", "-f", "-"}, code: 2, errs: []string{"can be given once"}},
		{name: "an argument", args: []string{"flux.yaml"}, code: 2, errs: []string{"unknown command"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, tc.stdin, append([]string{"migrate"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, errs)
			}
			if out != "" {
				t.Errorf("stdout is not empty:\n%s", out)
			}
			for _, e := range tc.errs {
				if !strings.Contains(errs, e) {
					t.Errorf("stderr lacks %q:\n%s", e, errs)
				}
			}
		})
	}
}

// fluxImagePolicyCRD is a minimal stand-in for Flux's ImagePolicy CRD:
// served as v1, any content kept.
func fluxImagePolicyCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "imagepolicies.image.toolkit.fluxcd.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "image.toolkit.fluxcd.io",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "imagepolicies", Singular: "imagepolicy", Kind: "ImagePolicy", ListKind: "ImagePolicyList",
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}

func TestMigrateFromCluster(t *testing.T) {
	// Proves that --from-cluster reads the live Flux objects from a real API
	// server, in one namespace or all, converts them as files are (server
	// metadata, status and Flux's reconcile annotation dropped), and skips a
	// kind whose Flux CRD is not installed with a note instead of failing.
	env, err := testenv.Start() // no image-toolkit CRDs: only Flux's are read
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	user, err := env.AddUser(envtest.User{Name: "migrate-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	migrate := func(args ...string) (int, string, string) {
		return runCLI(t, "", append([]string{"--kubeconfig", kubeconfig, "migrate", "--from-cluster"}, args...)...)
	}
	notInstalled := func(errs, resource string) bool {
		return strings.Contains(errs, "note: "+resource+".image.toolkit.fluxcd.io is not installed")
	}

	t.Run("no Flux CRDs", func(t *testing.T) {
		code, out, errs := migrate("-A")
		if code != 0 || out != "" {
			t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, errs)
		}
		for _, r := range []string{"imagerepositories", "imagepolicies", "imageupdateautomations"} {
			if !notInstalled(errs, r) {
				t.Errorf("no note that %s is not installed:\n%s", r, errs)
			}
		}
	})

	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{fluxImagePolicyCRD()},
	}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "image.toolkit.fluxcd.io", Version: "v1", Resource: "imagepolicies"}
	nsA, nsB := env.Namespace(t), env.Namespace(t)
	for _, ns := range []string{nsA, nsB} {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "image.toolkit.fluxcd.io/v1",
			"kind":       "ImagePolicy",
			"metadata": map[string]any{
				"name":        "podinfo",
				"namespace":   ns,
				"labels":      map[string]any{"app": "podinfo"},
				"annotations": map[string]any{"reconcile.fluxcd.io/requestedAt": "2026-01-01T00:00:00Z"},
				"finalizers":  []any{"finalizers.fluxcd.io"},
			},
			"spec": map[string]any{
				"imageRepositoryRef":     map[string]any{"name": "podinfo"},
				"policy":                 map[string]any{"semver": map[string]any{"range": ">=6.0.0"}},
				"digestReflectionPolicy": "IfNotPresent",
			},
			"status": map[string]any{"latestRef": map[string]any{"name": "ghcr.io/stefanprodan/podinfo", "tag": "6.5.0"}},
		}}
		if _, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The finalizer would keep the namespace from going away.
		t.Cleanup(func() {
			_, _ = dyn.Resource(gvr).Namespace(ns).Patch(context.Background(), "podinfo", "application/merge-patch+json",
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		})
	}
	want := func(ns string) string {
		return `apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  labels:
    app: podinfo
  name: podinfo
  namespace: ` + ns + `
spec:
  digestReflectionPolicy: IfNotPresent
  imageRepositoryRef:
    name: podinfo
  policy:
    semver:
      range: '>=6.0.0'
`
	}

	t.Run("one namespace", func(t *testing.T) {
		code, out, errs := migrate("-n", nsA)
		if code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, errs)
		}
		if out != want(nsA) {
			t.Errorf("got\n%s\nwant\n%s", out, want(nsA))
		}
		decodeStrictly(t, out)
		expectWarnings(t, errs, nil)
		if !notInstalled(errs, "imagerepositories") || !notInstalled(errs, "imageupdateautomations") || notInstalled(errs, "imagepolicies") {
			t.Errorf("want notes for the two kinds not installed, stderr:\n%s", errs)
		}
	})

	t.Run("an empty namespace", func(t *testing.T) {
		empty := env.Namespace(t)
		code, out, errs := migrate("-n", empty)
		if code != 0 || out != "" || !strings.Contains(errs, "note: no image.toolkit.fluxcd.io objects in namespace "+empty) {
			t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, errs)
		}
	})

	t.Run("all namespaces", func(t *testing.T) {
		code, out, errs := migrate("-A", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, errs)
		}
		var list struct {
			Items []imagev1.ImagePolicy `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range list.Items {
			got = append(got, p.Namespace+"/"+p.Name)
		}
		if !slices.Equal(got, []string{nsA + "/podinfo", nsB + "/podinfo"}) {
			t.Errorf("got %v, want the policies of %s and %s", got, nsA, nsB)
		}
	})
}

func TestMigrateArgoCDImageUpdater(t *testing.T) {
	// Proves that argocd-image-updater's configuration, as its
	// documentation's examples write it (v0.x annotations on Applications,
	// v1.x ImageUpdater objects), converts to the golden output: an
	// ImageRepository and an ImagePolicy per image and an automation per
	// Application or applicationRef, decoding strictly into our types,
	// with a warning naming the object and field of everything that does
	// not map. The annotated Applications are kept; ImageUpdaters are not.
	tests := []struct {
		file         string
		kinds        int
		applications int
		warnings     []string
	}{
		{"annotations-v0.yaml", 3*1 + 2*5, 3, []string{
			"Application argocd/production-app: metadata.annotations.argocd-image-updater.argoproj.io/image-list",
			"Application argocd/production-app: metadata.annotations.argocd-image-updater.argoproj.io/image-list",
			"Application argocd/production-app: metadata.annotations.argocd-image-updater.argoproj.io/write-back-method",
			"Application argocd/production-app: metadata.annotations.argocd-image-updater.argoproj.io/write-back-method",
			"Application argocd/guestbook: metadata.annotations.argocd-image-updater.argoproj.io/write-back-method",
			"Application argocd/dex: metadata.annotations.argocd-image-updater.argoproj.io/image-list",
		}},
		{"imageupdater-v1.yaml", 4*1 + 2*6, 0, []string{
			"ImageUpdater argocd/multi-app-image-updater: spec.applicationRefs[0].images[1].imageName",
			"ImageUpdater argocd/multi-app-image-updater: spec.applicationRefs[0].images[1].imageName",
			"ImageUpdater argocd/multi-app-image-updater: spec.applicationRefs[0].writeBackConfig",
			"ImageUpdater argocd/multi-app-image-updater: spec.applicationRefs[0].writeBackConfig",
			"ImageUpdater argocd/multi-app-image-updater: spec.applicationRefs[1].writeBackConfig",
			"ImageUpdater argocd/multi-app-image-updater: spec.applicationRefs[1].writeBackConfig",
			"ImageUpdater argocd/shop: spec.applicationRefs[1].namePattern",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			out := migrateGolden(t, filepath.Join("testdata", "migrate", "argocd-image-updater", tc.file),
				"argocd-image-updater-"+tc.file, tc.kinds, tc.warnings)
			if n := strings.Count(out, "\nkind: Application\n"); n != tc.applications {
				t.Errorf("%d Applications kept, want %d", n, tc.applications)
			}
		})
	}
}
