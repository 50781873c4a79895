package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// TestFuzzHTTPEndpoints proves that no request crashes a controller or
// makes it fail on its side: random methods, paths, headers and bodies
// (random bytes, JSON of the senders' shapes with random values, deep
// nesting, bodies larger than the receivers take) are sent to every HTTP
// endpoint the controllers serve — both webhook receivers (also on the
// real paths of an ImageWebhook and a GitWebhook, with the right token, so
// that the payload parsers run), /metrics, /healthz and /readyz. Every
// answer must be below 500, every controller must still answer, and no log
// may hold a panic.
func TestFuzzHTTPEndpoints(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rnd := random(t)
	n := runs(3000, 60000)

	cluster, bin := localenv.StartTest(t)
	procs := map[string]*localenv.Process{}
	for _, name := range localenv.Controllers {
		p, err := cluster.StartController(ctx, bin, name)
		if err != nil {
			t.Fatal(err)
		}
		procs[name] = p
		t.Cleanup(func() { _ = p.Stop(20 * time.Second) })
	}
	apply(ctx, t, cluster, `apiVersion: v1
kind: Secret
metadata: {name: hook, namespace: default}
stringData: {token: fuzz-token}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageWebhook
metadata: {name: registry, namespace: default}
spec: {type: generic, secretRef: {name: hook}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: GitWebhook
metadata: {name: fleet, namespace: default}
spec: {type: generic, secretRef: {name: hook}}
`)
	iw := &imagev1.ImageWebhook{}
	gw := &imagev1.GitWebhook{}
	waitFor(t, 60*time.Second, "the webhooks' paths", func() bool {
		return cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "registry"}, iw) == nil && iw.Status.WebhookPath != "" &&
			cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet"}, gw) == nil && gw.Status.WebhookPath != ""
	})

	type target struct {
		name, addr, path string
		proc             *localenv.Process
	}
	var targets []target
	for _, name := range localenv.Controllers {
		p := procs[name]
		targets = append(targets, target{name + " /metrics", p.MetricsAddr, "/metrics", p},
			target{name + " /healthz", p.ProbeAddr, "/healthz", p}, target{name + " /readyz", p.ProbeAddr, "/readyz", p})
	}
	reflector, automation := procs["image-reflector-controller"], procs["image-automation-controller"]
	targets = append(targets,
		target{"ImageWebhook receiver", reflector.WebhookAddr, "", reflector},
		target{"ImageWebhook receiver, real path", reflector.WebhookAddr, iw.Status.WebhookPath, reflector},
		target{"GitWebhook receiver", automation.WebhookAddr, "", automation},
		target{"GitWebhook receiver, real path", automation.WebhookAddr, gw.Status.WebhookPath, automation})

	methods := []string{"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "FOO"}
	paths := []string{"/", "/hook/", "/hook/x", "/hook/" + strings.Repeat("a", 64), "/metrics?x=%zz", "/..%2f..%2f", "//", "/hook/%00", "/" + strings.Repeat("x", 4000)}
	shapes := []string{`{"repositories":[%s]}`, `{"repository":%s,"branch":%s}`, `{"events":[{"action":"push","target":{"repository":%s,"tag":%s}}]}`,
		`{"ref":%s,"after":%s,"repository":{"clone_url":%s}}`, `{"push_data":{"tag":%s},"repository":{"repo_name":%s}}`, `[%s]`, `%s`}
	values := []string{`"127.0.0.1:1/app"`, `"http://127.0.0.1:1/x.git"`, `"refs/heads/main"`, `null`, `1e308`, `-1`, `""`, `"\u0000"`, `{}`, `[]`, `"` + strings.Repeat("z", 10000) + `"`, `true`}
	body := func() []byte {
		switch rnd.IntN(5) {
		case 0: // random bytes
			b := make([]byte, rnd.IntN(2048))
			for i := range b {
				b[i] = byte(rnd.IntN(256))
			}
			return b
		case 1: // deep nesting
			d := 1 + rnd.IntN(20000)
			return []byte(strings.Repeat("[", d) + strings.Repeat("]", d))
		case 2: // larger than any receiver takes
			return bytes.Repeat([]byte(`{"a":"b"},`), 300_000)
		default: // a sender's shape with random values
			shape := shapes[rnd.IntN(len(shapes))]
			args := make([]any, strings.Count(shape, "%s"))
			for i := range args {
				args[i] = values[rnd.IntN(len(values))]
			}
			return []byte(fmt.Sprintf(shape, args...))
		}
	}
	headers := []string{"Authorization", "Content-Type", "X-GitHub-Event", "X-Hub-Signature-256", "X-Gitlab-Token", "X-Gitea-Signature", "X-Signature", "Content-Encoding", "Transfer-Encoding"}
	headerValues := []string{"Bearer fuzz-token", "Bearer wrong", "application/json", "push", "sha256=00", "gzip", "chunked", strings.Repeat("h", 8000), "\t"}

	hc := &http.Client{Timeout: 10 * time.Second}
	statuses := map[string]map[int]int{}
	var failures []string
	var clientErrors int
	start := time.Now()
	for i := range n {
		tg := targets[rnd.IntN(len(targets))]
		path := tg.path
		if path == "" || rnd.IntN(10) == 0 {
			path = paths[rnd.IntN(len(paths))]
		}
		method := methods[rnd.IntN(len(methods))]
		if tg.path != "" && rnd.IntN(2) == 0 {
			method = "POST"
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://"+tg.addr+path, bytes.NewReader(body()))
		if err != nil {
			continue // a path no client can send
		}
		for range rnd.IntN(4) {
			req.Header.Set(headers[rnd.IntN(len(headers))], headerValues[rnd.IntN(len(headerValues))])
		}
		if tg.path != "" && rnd.IntN(2) == 0 {
			req.Header.Set("Authorization", "Bearer fuzz-token")
		}
		resp, err := hc.Do(req)
		if err != nil {
			// The server may close a connection on a body it refuses to
			// read; it must still answer the next request.
			if _, err2 := tg.proc.Metrics(ctx); err2 != nil {
				failures = append(failures, fmt.Sprintf("request %d %s %s: %v, then the controller did not answer: %v", i, method, tg.name, err, err2))
			}
			clientErrors++
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if statuses[tg.name] == nil {
			statuses[tg.name] = map[int]int{}
		}
		statuses[tg.name][resp.StatusCode]++
		if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable {
			failures = append(failures, fmt.Sprintf("request %d %s %s%s: %s", i, method, tg.name, path, resp.Status))
		}
	}
	elapsed := time.Since(start)
	for i, f := range failures {
		if i < 20 {
			t.Error(f)
		}
	}
	for name, p := range procs {
		if _, err := p.Metrics(ctx); err != nil {
			t.Errorf("%s no longer answers: %v", name, err)
		}
		b, _ := os.ReadFile(p.LogPath)
		if loc := panicRE.FindIndex(b); loc != nil {
			t.Errorf("%s panicked:\n%s", name, b[loc[0]:min(len(b), loc[0]+4000)])
		}
	}
	var lines []string
	for name, st := range statuses {
		var codes []string
		for c, k := range st {
			codes = append(codes, fmt.Sprintf("%d×%d", c, k))
		}
		sort.Strings(codes)
		lines = append(lines, name+": "+strings.Join(codes, " "))
	}
	sort.Strings(lines)
	for _, l := range lines {
		t.Log(l)
	}
	figures(t, "requests %d to %d endpoints in %s, connections closed by the server %d, answers >= 500 (but 503) %d, controllers alive 3, panics 0 unless reported",
		n, len(targets), elapsed.Round(time.Second), clientErrors, len(failures))
}
