package faults

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// fuzzKinds are the kinds TestFuzzThroughAPIServer makes, with their CRD
// files.
var fuzzKinds = []struct{ kind, group, crd string }{
	{"ImageRepository", "image.toolkit.dev", "charts/image-reflector-controller/files/crds/image.toolkit.dev_imagerepositories.yaml"},
	{"ImagePolicy", "image.toolkit.dev", "charts/image-reflector-controller/files/crds/image.toolkit.dev_imagepolicies.yaml"},
	{"ImageWebhook", "image.toolkit.dev", "charts/image-reflector-controller/files/crds/image.toolkit.dev_imagewebhooks.yaml"},
	{"HealthWebhook", "image.toolkit.dev", "charts/image-reflector-controller/files/crds/image.toolkit.dev_healthwebhooks.yaml"},
	{"ImageUpdateAutomation", "image.toolkit.dev", "charts/image-automation-controller/files/crds/image.toolkit.dev_imageupdateautomations.yaml"},
	{"GitWebhook", "image.toolkit.dev", "charts/image-automation-controller/files/crds/image.toolkit.dev_gitwebhooks.yaml"},
	{"UpdateJob", "update.toolkit.dev", "charts/update-job-controller/files/crds/update.toolkit.dev_updatejobs.yaml"},
}

// TestFuzzThroughAPIServer proves that no spec the API server accepts
// crashes a controller or leaves an object without a verdict: it generates
// random specs of every kind from the CRDs' OpenAPI schemas (seeded,
// IMAGE_TOOLKIT_FAULTS_SEED replays a run), with values drawn from pools of
// good, bad and odd strings for the fields that name things (URLs, images,
// durations, ranges, patterns, templates, paths, references), creates them
// with the three controllers running as processes, and checks that no
// controller panicked or died, and that, within a bound, every accepted
// object has a Ready condition whose reason is one of the declared reason
// constants. Objects the API server refuses (a pattern, a CEL rule) are
// counted, not sent on: refusing them is the API server's job.
func TestFuzzThroughAPIServer(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rnd := random(t)
	perKind := runs(10, 60)
	bound := 60 * time.Second
	if long() {
		bound = 3 * time.Minute
	}

	cluster, bin := localenv.StartTest(t)
	root := cluster.Root
	reasons := declaredReasons(t, root)
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0", "1.1.0", "v2", "main-abc1234-1700000000"})
	git := testgit.New(t, testgit.Options{Username: gitUser, Password: gitPassword})
	git.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": fmt.Sprintf(
		"image: %s:1.0.0 # {\"$imagepolicy\": \"default:fuzz-imagepolicy-0\"}\n", reg.Repo("app"))})
	procs := map[string]*localenv.Process{}
	for _, name := range localenv.Controllers {
		p, err := cluster.StartController(ctx, bin, name)
		if err != nil {
			t.Fatal(err)
		}
		procs[name] = p
		t.Cleanup(func() { _ = p.Stop(20 * time.Second) })
	}
	apply(ctx, t, cluster, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: default}
stringData: {username: %s, password: %s, token: t, bearerToken: b}
---
apiVersion: v1
kind: Secret
metadata: {name: garbage, namespace: default}
stringData: {identity: "not a key", known_hosts: "junk", ca.crt: "not pem", .dockerconfigjson: "{", git.asc: "junk", address: "::"}
---
apiVersion: v1
kind: Secret
metadata: {name: empty, namespace: default}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: fuzz-sa, namespace: default}
imagePullSecrets: [{name: garbage}]
`, gitUser, gitPassword))

	// Regression: a reference that is no object name used to be accepted,
	// and the webhooks' reconcilers then retried forever without a
	// condition (the Secret's Get fails before reaching the server).
	for _, kind := range []string{"ImageWebhook", "GitWebhook"} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "image.toolkit.dev/v1beta1", "kind": kind,
			"metadata": map[string]any{"name": "bad-ref", "namespace": "default"},
			"spec":     map[string]any{"type": "generic", "secretRef": map[string]any{"name": "../.."}},
		}}
		if err := cluster.Client.Create(ctx, u); err == nil || !strings.Contains(err.Error(), "secretRef.name") {
			t.Errorf("%s with secretRef.name ../..: %v, want refused by the API server", kind, err)
		}
	}

	g := &specGen{rnd: rnd, pools: fuzzPools(reg.Repo("app"), reg.Host, git.RepoURL("fleet"))}
	type made struct {
		kind, name string
		ttl        bool // an UpdateJob deleted once finished
	}
	var created []made
	refused := map[string]int{}
	tried := 0
	var refusals []string
	for _, k := range fuzzKinds {
		schema := loadSpecSchema(t, filepath.Join(root, k.crd))
		for i := range perKind {
			name := fmt.Sprintf("fuzz-%s-%d", strings.ToLower(k.kind), i)
			spec := g.object(schema, "spec", 0, k.kind)
			if g.rnd.IntN(10) > 0 {
				crossFieldRules(k.kind, spec)
			}
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": k.group + "/v1beta1", "kind": k.kind,
				"metadata": map[string]any{"name": name, "namespace": "default"},
				"spec":     spec,
			}}
			tried++
			if err := cluster.Client.Create(ctx, u); err != nil {
				refused[k.kind]++
				if len(refusals) < 40 || long() {
					refusals = append(refusals, fmt.Sprintf("%s: %v", k.kind, err))
				}
				continue
			}
			_, ttl := spec["ttlSecondsAfterFinished"]
			created = append(created, made{k.kind, name, ttl})
		}
	}
	for _, r := range refusals {
		t.Logf("refused by the API server: %.300s", r)
	}

	// Every accepted object gets a verdict within the bound.
	// The first verdict of each object counts: an UpdateJob may be gone
	// by its ttlSecondsAfterFinished before the next look.
	counts := map[string]int{} // "Kind Ready=Status Reason" → objects
	verdict := map[string]bool{}
	deadline := time.Now().Add(bound)
	var missing []string
	for {
		missing = missing[:0]
		for _, m := range created {
			if verdict[m.name] {
				continue
			}
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(map[bool]string{true: "update.toolkit.dev/v1beta1", false: "image.toolkit.dev/v1beta1"}[m.kind == "UpdateJob"])
			u.SetKind(m.kind)
			if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: m.name}, u); err != nil {
				if apierrors.IsNotFound(err) && m.ttl {
					// Finished and deleted between two looks: its
					// events hold the verdict.
					verdict[m.name] = true
					counts["UpdateJob finished and deleted by its ttlSecondsAfterFinished"]++
					continue
				}
				missing = append(missing, fmt.Sprintf("%s/%s: %v", m.kind, m.name, err))
				continue
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			var ready map[string]any
			for _, c := range conds {
				if c, ok := c.(map[string]any); ok && c["type"] == "Ready" {
					ready = c
				}
			}
			reason, _ := ready["reason"].(string)
			if ready == nil || !reasons[reason] {
				spec, _ := json.Marshal(u.Object["spec"])
				missing = append(missing, fmt.Sprintf("%s/%s: Ready %v; spec %s", m.kind, m.name, ready, spec))
				continue
			}
			verdict[m.name] = true
			counts[fmt.Sprintf("%s Ready=%v %s", m.kind, ready["status"], reason)]++
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, m := range missing {
		// The controllers' lines about the object, for the post-mortem.
		name := strings.SplitN(strings.SplitN(m, ":", 2)[0], "/", 2)[1]
		var lines []string
		for _, p := range procs {
			b, _ := os.ReadFile(p.LogPath)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, `"`+name+`"`) && len(lines) < 6 {
					lines = append(lines, l)
				}
			}
		}
		t.Errorf("no verdict with a declared reason after %s: %s\n%s", bound, m, strings.Join(lines, "\n"))
	}

	// No controller died or panicked.
	for name, p := range procs {
		if _, err := p.Metrics(ctx); err != nil {
			t.Errorf("%s no longer answers: %v", name, err)
		}
		b, _ := os.ReadFile(p.LogPath)
		if loc := panicRE.FindIndex(b); loc != nil {
			t.Errorf("%s panicked:\n%s", name, b[loc[0]:min(len(b), loc[0]+4000)])
		}
	}
	var verdicts []string
	for k, n := range counts {
		verdicts = append(verdicts, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(verdicts)
	for _, v := range verdicts {
		t.Log(v)
	}
	var nRefused int
	for _, n := range refused {
		nRefused += n
	}
	figures(t, "objects tried %d (%d per kind), refused by the API server %d %v, accepted %d, with a declared reason %d, without %d, panics 0 unless reported, distinct kind/status/reason verdicts %d",
		tried, perKind, nRefused, refused, len(created), len(verdict), len(missing), len(verdicts))
}

// crossFieldRules makes most generated specs follow the CEL rules that tie
// fields together, which a per-field generator cannot know; the tenth left
// alone checks that the API server refuses them.
func crossFieldRules(kind string, spec map[string]any) {
	switch kind {
	case "ImagePolicy":
		if spec["digestReflectionPolicy"] == "Always" {
			if spec["interval"] == nil {
				spec["interval"] = "1m"
			}
		} else {
			delete(spec, "interval")
		}
	case "ImageUpdateAutomation", "UpdateJob":
		push, checkout := spec, spec
		if kind == "ImageUpdateAutomation" {
			git, _ := spec["git"].(map[string]any)
			push, checkout = git, git
		}
		if push == nil {
			return
		}
		p, _ := push["push"].(map[string]any)
		if p != nil && p["pullRequest"] != nil {
			delete(p, "branch")
			delete(p, "refspec")
		}
		if kind == "UpdateJob" {
			ref, _, _ := unstructured.NestedMap(checkout, "checkout", "ref")
			if ref["branch"] == nil && (p == nil || (p["branch"] == nil && p["refspec"] == nil && p["pullRequest"] == nil)) {
				if p == nil {
					p = map[string]any{}
					push["push"] = p
				}
				p["branch"] = "main"
			}
			// Setters name each policy once.
			if u, ok := spec["update"].(map[string]any); ok {
				if setters, ok := u["setters"].([]any); ok {
					seen := map[any]bool{}
					var keep []any
					for _, st := range setters {
						if m, ok := st.(map[string]any); ok && !seen[m["policy"]] {
							seen[m["policy"]] = true
							keep = append(keep, st)
						}
					}
					u["setters"] = keep
				}
			}
		}
	}
}

// declaredReasons reads the reason constants as tests/readme does: from
// pkg/runtime/conditions and the two API packages.
func declaredReasons(t *testing.T, root string) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s*(\w+Reason)\s*=\s*"(\w+)"`)
	out := map[string]bool{}
	for _, f := range []string{"pkg/runtime/conditions/conditions.go", "pkg/apis/image/v1beta1/condition_types.go", "pkg/apis/update/v1beta1/condition_types.go"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out[m[2]] = true
		}
	}
	if len(out) < 20 {
		t.Fatalf("found only %d reason constants", len(out))
	}
	return out
}

// loadSpecSchema returns the OpenAPI schema of a CRD's storage version's spec.
func loadSpecSchema(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
	for _, v := range versions {
		v := v.(map[string]any)
		if v["storage"] == true {
			spec, ok, _ := unstructured.NestedMap(v, "schema", "openAPIV3Schema", "properties", "spec")
			if ok {
				return spec
			}
		}
	}
	t.Fatalf("%s: no storage version with a spec schema", path)
	return nil
}

// specGen makes random values that follow a schema: types, enums, bounds,
// required fields, and for strings a pool chosen by the field's name.
type specGen struct {
	rnd   *rand.Rand
	pools map[string][]string
}

// oneOf are objects whose CEL rules want exactly one property set.
var oneOf = map[string]bool{"spec.policy": true, "spec.git.checkout.ref": true, "spec.checkout.ref": true}

// skipped are fields left out: spec.update.container runs a pod (container
// mode, which needs a node), spec.suspend would leave an object alone by
// design.
var skipped = map[string]bool{"spec.update.container": true, "spec.suspend": true}

func (g *specGen) value(s map[string]any, path string, depth int, kind string) any {
	if enum, ok := s["enum"].([]any); ok && len(enum) > 0 {
		return enum[g.rnd.IntN(len(enum))]
	}
	if s["x-kubernetes-int-or-string"] == true {
		if g.rnd.IntN(2) == 0 {
			return g.rnd.IntN(100)
		}
		return []string{"1", "100m", "1Gi", "x"}[g.rnd.IntN(4)]
	}
	switch s["type"] {
	case "object":
		return g.object(s, path, depth, kind)
	case "array":
		items, _ := s["items"].(map[string]any)
		n := g.rnd.IntN(4)
		if mx, ok := s["maxItems"].(float64); ok {
			n = min(n, int(mx))
		}
		if mn, ok := s["minItems"].(float64); ok {
			n = max(n, int(mn))
		}
		out := make([]any, 0, n)
		for range n {
			out = append(out, g.value(items, path+"[]", depth+1, kind))
		}
		return out
	case "integer", "number":
		lo, hi := 0, 100
		if v, ok := s["minimum"].(float64); ok {
			lo = int(v)
		}
		if v, ok := s["maximum"].(float64); ok {
			hi = int(v)
		}
		switch g.rnd.IntN(4) {
		case 0:
			return lo
		case 1:
			return hi
		}
		return lo + g.rnd.IntN(max(1, min(hi-lo, 1000)))
	case "boolean":
		return g.rnd.IntN(2) == 0
	case "string":
		return g.str(s, path)
	}
	return nil
}

func (g *specGen) object(s map[string]any, path string, depth int, kind string) map[string]any {
	out := map[string]any{}
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		if add, ok := s["additionalProperties"].(map[string]any); ok {
			for range g.rnd.IntN(3) {
				out[g.pick("key")] = g.value(add, path+"{}", depth+1, kind)
			}
		}
		return out
	}
	required := map[string]bool{}
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			required[r.(string)] = true
		}
	}
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names) // map order must not change a seeded run
	var only string
	if oneOf[path] && g.rnd.IntN(10) > 0 {
		only = names[g.rnd.IntN(len(names))]
	}
	for _, n := range names {
		p := path + "." + n
		include := required[n] || (depth < 6 && g.rnd.IntN(2) == 0)
		switch {
		case skipped[p]:
			continue
		case only != "":
			include = n == only
		case kind == "ImageUpdateAutomation" && p == "spec.sourceRef":
			// Exclusive with git.repository, which is kept; Flux's
			// GitRepository kind is not installed here.
			include = false
		case kind == "ImageUpdateAutomation" && (p == "spec.git.repository" || p == "spec.git.checkout"):
			include = true
		case kind == "UpdateJob" && p == "spec.update.setters":
			include = g.rnd.IntN(4) > 0
		}
		if include {
			out[n] = g.value(props[n].(map[string]any), p, depth+1, kind)
		}
	}
	return out
}

// str picks a string for a field: from its name's pool when there is one
// (a match of the schema's pattern when it has one, most of the time),
// else an odd string; cut to maxLength.
func (g *specGen) str(s map[string]any, path string) string {
	field := path[strings.LastIndex(path, ".")+1:]
	field = strings.TrimSuffix(strings.TrimSuffix(field, "[]"), "{}")
	if format, _ := s["format"].(string); format == "date-time" {
		return time.Now().Add(-time.Duration(g.rnd.IntN(3600)) * time.Second).UTC().Format(time.RFC3339)
	}
	pool := g.pools[field]
	if pool == nil {
		pool = g.pools[fieldClass(field, path)]
	}
	v := ""
	if pattern, ok := s["pattern"].(string); ok {
		if re, err := regexp.Compile(pattern); err == nil && g.rnd.IntN(8) > 0 {
			var matching []string
			for _, p := range pool {
				if re.MatchString(p) {
					matching = append(matching, p)
				}
			}
			if len(matching) > 0 {
				pool = matching
			}
		}
	}
	if len(pool) > 0 && (g.rnd.IntN(10) > 0 || s["pattern"] != nil) {
		v = pool[g.rnd.IntN(len(pool))]
	} else {
		v = g.pick("odd")
	}
	if mx, ok := s["maxLength"].(float64); ok && len(v) > int(mx) {
		v = v[:int(mx)]
	}
	if mn, ok := s["minLength"].(float64); ok && len(v) < int(mn) && g.rnd.IntN(8) > 0 {
		v += strings.Repeat("x", int(mn)-len(v))
	}
	return v
}

// fieldClass groups field names that take the same kind of value.
func fieldClass(field, path string) string {
	switch {
	case field == "interval" || field == "timeout" || field == "duration":
		return "duration"
	case strings.HasSuffix(field, "Template"):
		return "template"
	case field == "name" && strings.Contains(path, "imageRepositoryRef"):
		return "repoName"
	case field == "name" || field == "serviceAccountName":
		return "ref"
	case field == "semver":
		return "range"
	case field == "branch" || field == "base" || field == "tag":
		return "branch"
	case field == "matchLabels":
		return "word"
	case field == "messageTemplateValues" || field == "options":
		return "value"
	case field == "values" || field == "labels" || field == "assignees" || field == "reviewers" || field == "include" || field == "exclude" || field == "exclusionList":
		return "word"
	}
	return ""
}

func (g *specGen) pick(pool string) string {
	p := g.pools[pool]
	return p[g.rnd.IntN(len(p))]
}

func fuzzPools(image, regHost, gitURL string) map[string][]string {
	sha := func(n int) string {
		b := make([]byte, n/2)
		for i := range b {
			b[i] = byte(i * 37)
		}
		return hex.EncodeToString(b)
	}
	return map[string][]string{
		"duration": {"1s", "2s", "30s", "1m", "5m", "1h", "0s", "100ms", "1.5m", "2h30m", "10m"},
		"url": {gitURL, gitURL, "http://127.0.0.1:1/x.git", "https://127.0.0.1:1/x.git", "ssh://git@127.0.0.1:1/x.git",
			"http://[::1]:1/a", "https://user:pw@127.0.0.1:1/x", "http://127.0.0.1:1/%zz", "ssh://127.0.0.1:1", "ftp://127.0.0.1/x"},
		"apiURL":   {"http://127.0.0.1:1/api/", "https://127.0.0.1:1/", "http://127.0.0.1:1/%zz"},
		"image":    {image, image, image + ":1.0.0", regHost + "/missing", "127.0.0.1:1/x/y", "UPPER/Case", "a//b", "", "127.0.0.1:1/x@sha256:" + sha(64)},
		"host":     {regHost, "127.0.0.1:1", "bad host", ""},
		"range":    {">=1.0.0", "~1.0", "^1", "1.x", ">=1.0.0 <2.0.0", "not a range", "*", "=1.0.0 || >2", "", ">=1.0.0-0"},
		"pattern":  {`^1\..*`, `^(?P<ts>[0-9]+)$`, "[", `^main-[a-f0-9]+-(?P<ts>[0-9]+)$`, ".*", "((a+)+)+$", "(?P<x>", ""},
		"extract":  {"$ts", "", "${1}", "$missing", "$x"},
		"cron":     {"@daily", "0 * * * *", "*/5 * * * *", "@weekly", "59 23 31 12 *", "0 0 30 2 *"},
		"timeZone": {"UTC", "Europe/Paris", "Not/AZone", "", "Local"},
		"branch":   {"main", "main", "dev", "", "a..b", "feature/x", "refs/heads/main", "-x", "HEAD"},
		"commit":   {"abcdef0", sha(40), sha(64)},
		"email":    {"bot@example.com", "x", "", "a@b"},
		"template": {"{{ .AutomationObject }}", "{{ range .Changed.Changes }}{{ .NewValue }}{{ end }}", "{{", "{{ .Nope }}",
			`{{ index .Values "k" }}`, "plain", "{{ .AutomationObject | printf \"%q\" }}", `{{ template "x" }}`},
		"path":       {"./", "./deploy", "deploy", "../../etc", "/abs", "", "deploy/../..", "./missing"},
		"policy":     {"default:fuzz-imagepolicy-0", "default:missing", "other:x"},
		"tag":        {"1.0.0", "v2", "latest", "1.1.0"},
		"digest":     {"sha256:" + sha(64), "sha512:" + sha(128)},
		"refspec":    {"refs/heads/main:refs/heads/auto", "bad", "+HEAD:refs/heads/x", ":refs/heads/main"},
		"operator":   {"In", "NotIn", "Exists", "DoesNotExist", "Bogus"},
		"key":        {"app", "team", "a.b/c", "bad key", ""},
		"platform":   {"linux/amd64", "linux/arm64/v8", "windows/amd64"},
		"ref":        {"creds", "creds", "garbage", "empty", "missing", "fuzz-sa", ""},
		"repoName":   {"fuzz-imagerepository-0", "fuzz-imagerepository-1", "fuzz-imagerepository-2", "missing"},
		"namespace":  {"default", "default", "other", ""},
		"apiVersion": {"source.toolkit.fluxcd.io/v1", "x/v1", ""},
		"word":       {"a", "b", "x-y", "", "ümlaut"},
		"value":      {"v", "", "x y"},
		"odd":        {"", "x", "ünïcødé", "a b", strings.Repeat("a", 300), "{{", "../..", "\x00", "%s%n", "0"},
	}
}
