package faults

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/testing/testgitea"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// secretSet is every credential a scenario gave the controllers, each with
// a distinctive random value, and the forms in which a leak could show.
type secretSet struct {
	names []string
	forms map[string][]string // name → strings that must appear nowhere
}

func (s *secretSet) add(name, value string, extra ...string) {
	if s.forms == nil {
		s.forms = map[string][]string{}
	}
	s.names = append(s.names, name)
	forms := []string{value, base64.StdEncoding.EncodeToString([]byte(value))}
	// A key file leaks just as much by one line of its body: look for
	// each long line (a PEM or armored body line) on its own.
	for _, l := range strings.Split(value, "\n") {
		if l = strings.TrimSpace(l); len(l) >= 40 && !strings.HasPrefix(l, "-----") {
			forms = append(forms, l)
		}
	}
	s.forms[name] = append(forms, extra...)
}

// find reports which secrets text holds, and where.
func (s *secretSet) find(where, text string) []string {
	var leaks []string
	for _, name := range s.names {
		for _, f := range s.forms[name] {
			if i := strings.Index(text, f); i >= 0 {
				lo, hi := max(0, i-200), min(len(text), i+len(f)+100)
				leaks = append(leaks, fmt.Sprintf("%s: %s found: …%s…", where, name, text[lo:hi]))
				break
			}
		}
	}
	return leaks
}

// distinct is a random value no program would print by chance.
func distinct(label string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "leak-" + label + "-" + hex.EncodeToString(b)
}

// TestSecretsNeverLeak proves that no credential the controllers read ends
// up in their logs (at --log-level=trace, the most verbose), in Events, in
// any object of any kind (statuses included) or in their /metrics: it runs
// every credential kind through the three controllers, accepted and
// refused (authentication errors are where leaks hide), each with a
// distinctive random value, then looks for each value, its base64 form,
// each line of a key's body and a basic-auth header made of it.
//
// Credential kinds: a registry's docker config JSON (right and wrong
// password, behind a bearer-token realm), a registry proxy's password; git
// over HTTPS with basic auth and with a bearer token (right and wrong), git
// over SSH with a passphrase-protected key (right and wrong passphrase) and
// known_hosts; commit signing with an OpenPGP key and an SSH key, each with
// a passphrase; a forge token for pull requests (Gitea, right and wrong);
// the tokens of an ImageWebhook and a GitWebhook, called with the right
// and a wrong token.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var secrets secretSet
	basic := func(user, pass string) string {
		return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	}

	// The servers, each demanding its credential.
	regPass, regWrong := distinct("registry-password"), distinct("registry-wrong")
	reg := testregistry.New(t, testregistry.Options{Username: "robot", Password: regPass, Bearer: true})
	reg.PushTags(t, "app", []string{"1.0.0", "1.1.0"})
	secrets.add("registry password", regPass, basic("robot", regPass))
	secrets.add("wrong registry password", regWrong, basic("robot", regWrong))
	proxyPass := distinct("proxy-password")
	proxy := testgit.NewProxy(t, "proxyuser", distinct("proxy-real"))
	secrets.add("registry proxy password", proxyPass, basic("proxyuser", proxyPass))

	gitPass, gitWrong := distinct("git-password"), distinct("git-wrong")
	httpsBasic := testgit.New(t, testgit.Options{Username: "bot", Password: gitPass, TLS: true})
	secrets.add("git password", gitPass, basic("bot", gitPass))
	secrets.add("wrong git password", gitWrong, basic("bot", gitWrong))
	bearer, bearerWrong := distinct("git-bearer"), distinct("git-bearer-wrong")
	httpsBearer := testgit.New(t, testgit.Options{BearerToken: bearer, TLS: true})
	secrets.add("git bearer token", bearer)
	secrets.add("wrong git bearer token", bearerWrong)
	sshPass := distinct("ssh-passphrase")
	sshKey, sshPub := testgit.SSHKeygen(t, sshPass)
	sshd := testgit.NewSSH(t)
	sshd.Authorize(t, sshPub)
	secrets.add("git SSH key", string(sshKey))
	secrets.add("git SSH key passphrase", sshPass)
	sshWrong := distinct("ssh-wrong")
	secrets.add("wrong SSH passphrase", sshWrong)

	signSSHPass := distinct("sign-ssh-passphrase")
	signSSHKey, _ := testgit.SSHKeygen(t, signSSHPass)
	secrets.add("SSH signing key", string(signSSHKey))
	secrets.add("SSH signing passphrase", signSSHPass)
	gpgPass := distinct("gpg-passphrase")
	gpgSecret := gpgKey(t, gpgPass)
	secrets.add("OpenPGP signing key", gpgSecret)
	secrets.add("OpenPGP passphrase", gpgPass)

	imageHookToken, gitHookToken := distinct("image-webhook"), distinct("git-webhook")
	secrets.add("ImageWebhook token", imageHookToken)
	secrets.add("GitWebhook token", gitHookToken)
	wrongHookToken := distinct("webhook-wrong")
	secrets.add("wrong webhook token", wrongHookToken)

	manifest := fmt.Sprintf("image: %s:1.0.0 # {\"$imagepolicy\": \"default:app\"}\n", reg.Repo("app"))
	files := map[string]string{"deploy/app.yaml": manifest}
	for _, r := range []*testgit.Repos{&httpsBasic.Repos, &httpsBearer.Repos, &sshd.Repos} {
		r.CreateRepo(t, "fleet", files)
	}
	gitea, err := testgitea.Start(ctx, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gitea.Stop() })
	giteaURL, err := gitea.CreateRepo(ctx, "fleet", files)
	if err != nil {
		t.Fatal(err)
	}
	secrets.add("forge token", gitea.Token)
	secrets.add("forge administrator password", gitea.Password)
	forgeWrong := distinct("forge-wrong")
	secrets.add("wrong forge token", forgeWrong)

	// Every controller at its most verbose.
	cluster, bin := localenv.StartTest(t)
	procs := map[string]*localenv.Process{}
	for _, name := range localenv.Controllers {
		p, err := cluster.StartController(ctx, bin, name, "--log-level=trace")
		if err != nil {
			t.Fatal(err)
		}
		procs[name] = p
		t.Cleanup(func() { _ = p.Stop(20 * time.Second) })
	}

	indent := func(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ") }
	dockerConfig := func(pass string) string {
		return fmt.Sprintf(`{"auths":{%q:{"username":"robot","password":%q}}}`, reg.Host, pass)
	}
	automation := func(name, url, secret, extra string) string {
		return fmt.Sprintf(`---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata: {name: %s, namespace: default}
spec:
  interval: 1m
  git:
    repository: {url: %q, secretRef: {name: %s}}
    checkout: {ref: {branch: main}}
    commit:
      author: {name: imagebot, email: imagebot@example.com}
%s
  update: {path: ./deploy, strategy: Setters}
  policySelector: {matchLabels: {app: app}}
`, name, url, secret, extra)
	}
	caBasic, caBearer := indent(string(httpsBasic.CAPEM)), indent(string(httpsBearer.CAPEM))
	objects := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: registry, namespace: default}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '%[1]s'}
---
apiVersion: v1
kind: Secret
metadata: {name: registry-wrong, namespace: default}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '%[2]s'}
---
apiVersion: v1
kind: Secret
metadata: {name: registry-proxy, namespace: default}
stringData: {address: %[3]q, username: proxyuser, password: %[4]q}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: app, namespace: default, labels: {hook: "yes"}}
spec: {image: %[5]s, interval: 1m, insecure: true, secretRef: {name: registry}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: app-wrong, namespace: default}
spec: {image: %[5]s, interval: 1m, insecure: true, secretRef: {name: registry-wrong}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: app-proxy, namespace: default}
spec: {image: %[5]s, interval: 1m, insecure: true, secretRef: {name: registry}, proxySecretRef: {name: registry-proxy}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: app, namespace: default, labels: {app: app}}
spec: {imageRepositoryRef: {name: app}, policy: {semver: {range: ">=1.0.0"}}}
---
apiVersion: v1
kind: Secret
metadata: {name: git-basic, namespace: default}
stringData:
  username: bot
  password: %[6]q
  ca.crt: |
    %[7]s
---
apiVersion: v1
kind: Secret
metadata: {name: git-basic-wrong, namespace: default}
stringData:
  username: bot
  password: %[8]q
  ca.crt: |
    %[7]s
---
apiVersion: v1
kind: Secret
metadata: {name: git-bearer, namespace: default}
stringData:
  bearerToken: %[9]q
  ca.crt: |
    %[10]s
---
apiVersion: v1
kind: Secret
metadata: {name: git-bearer-wrong, namespace: default}
stringData:
  bearerToken: %[11]q
  ca.crt: |
    %[10]s
---
apiVersion: v1
kind: Secret
metadata: {name: git-ssh, namespace: default}
stringData:
  password: %[12]q
  identity: |
    %[13]s
  known_hosts: |
    %[14]s
---
apiVersion: v1
kind: Secret
metadata: {name: git-ssh-wrong, namespace: default}
stringData:
  password: %[15]q
  identity: |
    %[13]s
  known_hosts: |
    %[14]s
---
apiVersion: v1
kind: Secret
metadata: {name: sign-gpg, namespace: default}
stringData:
  passphrase: %[16]q
  git.asc: |
    %[17]s
---
apiVersion: v1
kind: Secret
metadata: {name: sign-ssh, namespace: default}
stringData:
  password: %[18]q
  identity: |
    %[19]s
---
apiVersion: v1
kind: Secret
metadata: {name: forge, namespace: default}
stringData: {username: %[20]s, password: %[21]q}
---
apiVersion: v1
kind: Secret
metadata: {name: forge-wrong, namespace: default}
stringData: {token: %[22]q}
---
apiVersion: v1
kind: Secret
metadata: {name: image-hook, namespace: default}
stringData: {token: %[23]q}
---
apiVersion: v1
kind: Secret
metadata: {name: git-hook, namespace: default}
stringData: {token: %[24]q}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageWebhook
metadata: {name: registry, namespace: default}
spec: {type: generic, secretRef: {name: image-hook}, imageRepositorySelector: {matchLabels: {hook: "yes"}}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: GitWebhook
metadata: {name: fleet, namespace: default}
spec: {type: generic, secretRef: {name: git-hook}}
`, dockerConfig(regPass), dockerConfig(regWrong), proxy.URL, proxyPass, reg.Repo("app"),
		gitPass, caBasic, gitWrong, bearer, caBearer, bearerWrong,
		sshPass, indent(string(sshKey)), indent(string(sshd.KnownHosts)), sshWrong,
		gpgPass, indent(gpgSecret), signSSHPass, indent(string(signSSHKey)),
		gitea.Admin, gitea.Token, forgeWrong, imageHookToken, gitHookToken)
	// The refused credentials' automations name another push branch (their
	// fetch fails first): automations pushing to one branch take turns
	// (docs/api.md), and their failing jobs' retries would hold the
	// accepted ones back for minutes.
	refused := "    push: {branch: refused}"
	objects += automation("basic", httpsBasic.RepoURL("fleet"), "git-basic", "      signingKey: {type: gpg, secretRef: {name: sign-gpg}}")
	objects += automation("basic-wrong", httpsBasic.RepoURL("fleet"), "git-basic-wrong", refused)
	objects += automation("bearer", httpsBearer.RepoURL("fleet"), "git-bearer", "      signingKey: {type: ssh, secretRef: {name: sign-ssh}}")
	objects += automation("bearer-wrong", httpsBearer.RepoURL("fleet"), "git-bearer-wrong", refused)
	objects += automation("ssh", sshd.RepoURL("fleet"), "git-ssh", "")
	objects += automation("ssh-wrong", sshd.RepoURL("fleet"), "git-ssh-wrong", refused)
	objects += automation("forge", giteaURL, "forge", "    push: {pullRequest: {provider: gitea}}")
	objects += automation("forge-wrong", giteaURL, "forge", "    push: {pullRequest: {provider: gitea, branchTemplate: wrong-token, secretRef: {name: forge-wrong}}}")
	apply(ctx, t, cluster, objects)

	// Every automation ran: the right credentials pushed or proposed, the
	// wrong ones failed.
	c := cluster.Client
	ok := map[string]bool{"basic": true, "bearer": true, "ssh": true, "forge": true}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		// A refused credential is done once the automation is not Ready
		// or a Warning names one of its UpdateJobs (whose retries take a
		// minute more, while the automation says Progressing).
		events := &corev1.EventList{}
		if err := c.List(ctx, events, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		warned := map[string]bool{}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning {
				n := e.InvolvedObject.Name
				if e.InvolvedObject.Kind == "UpdateJob" {
					n = n[:max(0, strings.LastIndex(n, "-"))]
				}
				warned[n] = true
			}
		}
		var waiting []string
		for _, name := range []string{"basic", "basic-wrong", "bearer", "bearer-wrong", "ssh", "ssh-wrong", "forge", "forge-wrong"} {
			a := &imagev1.ImageUpdateAutomation{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, a); err != nil {
				t.Fatal(err)
			}
			ready := meta.FindStatusCondition(a.Status.Conditions, "Ready")
			switch {
			case ok[name] && (a.Status.LastPushCommit != "" || a.Status.LastPullRequest != nil):
			case !ok[name] && (warned[name] || ready != nil && ready.Status == metav1.ConditionFalse):
			default:
				waiting = append(waiting, fmt.Sprintf("%s (%+v)", name, ready))
			}
		}
		for _, name := range []string{"app-wrong", "app-proxy"} {
			r := &imagev1.ImageRepository{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, r); err != nil {
				t.Fatal(err)
			}
			if ready := meta.FindStatusCondition(r.Status.Conditions, "Ready"); ready == nil || ready.Status != "False" {
				waiting = append(waiting, fmt.Sprintf("%s (%+v)", name, ready))
			}
		}
		if len(waiting) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s; logs:\n%s\n%s", strings.Join(waiting, ", "),
				procs["image-automation-controller"].Log(), procs["update-job-controller"].Log())
		}
		time.Sleep(time.Second)
	}

	// The signing keys were read and used: the pushed commits are signed.
	for _, bare := range []string{httpsBasic.BarePath("fleet"), httpsBearer.BarePath("fleet")} {
		if commit := gitOut(t, bare, "cat-file", "commit", "main"); !strings.Contains(commit, "gpgsig") {
			t.Errorf("the commit pushed to %s is not signed:\n%s", bare, commit)
		}
	}

	// The webhooks, called with their tokens and with a wrong one.
	hookPath := func(obj client.Object, path *string) string {
		deadline := time.Now().Add(time.Minute)
		for *path == "" {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s has no webhookPath", obj.GetName())
			}
			time.Sleep(200 * time.Millisecond)
		}
		return *path
	}
	iw := &imagev1.ImageWebhook{}
	iw.Name, iw.Namespace = "registry", "default"
	gw := &imagev1.GitWebhook{}
	gw.Name, gw.Namespace = "fleet", "default"
	calls := []struct {
		addr, path, token, body string
		want                    int
	}{
		{procs["image-reflector-controller"].WebhookAddr, hookPath(iw, &iw.Status.WebhookPath), imageHookToken, `{"repositories":["` + reg.Repo("app") + `"]}`, http.StatusAccepted},
		{procs["image-reflector-controller"].WebhookAddr, iw.Status.WebhookPath, wrongHookToken, `{"repositories":["` + reg.Repo("app") + `"]}`, http.StatusUnauthorized},
		{procs["image-automation-controller"].WebhookAddr, hookPath(gw, &gw.Status.WebhookPath), gitHookToken, `{"repository":"` + httpsBasic.RepoURL("fleet") + `","branch":"main"}`, http.StatusAccepted},
		{procs["image-automation-controller"].WebhookAddr, gw.Status.WebhookPath, wrongHookToken, `{"repository":"` + httpsBasic.RepoURL("fleet") + `","branch":"main"}`, http.StatusUnauthorized},
	}
	// The long run calls each many times and waits for the refused
	// forge token's job to give up after all its attempts.
	rounds := runs(1, 20)
	for range rounds - 1 {
		calls = append(calls, calls[:4]...)
	}
	for _, call := range calls {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+call.addr+call.path, strings.NewReader(call.body))
		req.Header.Set("Authorization", "Bearer "+call.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// 2xx for the right token; a refusal (4xx) for the wrong one.
		if (call.want < 300) != (resp.StatusCode < 300) {
			t.Errorf("POST %s with %s: %s", call.path, call.token[:20], resp.Status)
		}
	}
	if long() {
		waitFor(t, 3*time.Minute, "forge-wrong's job to fail after its attempts", func() bool {
			jobs := &updatev1.UpdateJobList{}
			if err := c.List(ctx, jobs, client.InNamespace("default")); err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs.Items {
				if strings.HasPrefix(j.Name, "forge-wrong-") && j.Status.Phase == updatev1.UpdateJobFailed {
					return true
				}
			}
			return false
		})
	}
	time.Sleep(3 * time.Second) // let the calls' work and events land

	// Now look everywhere.
	var leaks []string
	var logBytes, objectBytes, metricBytes int
	logs, _ := filepath.Glob(filepath.Join(cluster.Dir, "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		logBytes += len(b)
		leaks = append(leaks, secrets.find(filepath.Base(l), string(b))...)
	}
	for name, p := range procs {
		// zap writes trace (V(2)) lines as LEVEL(-2): proof of the level.
		if b, _ := os.ReadFile(p.LogPath); !strings.Contains(string(b), "LEVEL(-2)") || !strings.Contains(string(b), "DEBUG") {
			t.Errorf("%s logged no trace or debug line", name)
		}
	}
	kinds, err := cluster.KubectlCmd(ctx, "api-resources", "--verbs=list", "-o", "name").Output()
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, k := range strings.Fields(string(kinds)) {
		if k == "secrets" { // where the values belong
			continue
		}
		listed = append(listed, k)
	}
	out, err := cluster.KubectlCmd(ctx, "get", strings.Join(listed, ","), "-A", "-o", "yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get: %v\n%s", err, out)
	}
	objectBytes = len(out)
	leaks = append(leaks, secrets.find("objects", string(out))...)
	for _, name := range []string{"Event", "ImageUpdateAutomation", "UpdateJob", "ImageRepository"} {
		if !strings.Contains(string(out), "kind: "+name+"\n") {
			t.Errorf("the objects read hold no %s", name)
		}
	}
	for name, p := range procs {
		m, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		metricBytes += len(m)
		leaks = append(leaks, secrets.find(name+" /metrics", m)...)
	}
	for _, l := range leaks {
		t.Error(l)
	}
	var forms int
	for _, f := range secrets.forms {
		forms += len(f)
	}
	figures(t, "secrets %d (%d forms looked for), webhook calls %d, logs %d files %d KiB at trace, objects of %d kinds %d KiB, metrics %d KiB, leaks %d",
		len(secrets.names), forms, len(calls), len(logs), logBytes/1024, len(listed), objectBytes/1024, metricBytes/1024, len(leaks))
}

// TestSecretSetFinds proves that the search of TestSecretsNeverLeak finds
// a secret in each form a leak takes: as is, base64-encoded, one line of a
// key's body, a basic-auth header; and nothing else.
func TestSecretSetFinds(t *testing.T) {
	t.Parallel()
	var s secretSet
	pass := distinct("pw")
	key := "-----BEGIN KEY-----\n" + strings.Repeat("QUJD", 16) + "\n" + strings.Repeat("REVG", 16) + "\n-----END KEY-----\n"
	s.add("password", pass, base64.StdEncoding.EncodeToString([]byte("bot:"+pass)))
	s.add("key", key)
	for _, tt := range []struct {
		text string
		want int
	}{
		{"error: " + pass + " refused", 1},
		{"secret data: " + base64.StdEncoding.EncodeToString([]byte(pass)), 1},
		{"Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("bot:"+pass)), 1},
		{"parsing key: line " + strings.Repeat("REVG", 16) + " bad", 1},
		{"both " + pass + " and " + key, 2},
		{"password *** refused; -----BEGIN KEY-----", 0},
	} {
		if got := len(s.find("text", tt.text)); got != tt.want {
			t.Errorf("find(%q) found %d secrets, want %d", tt.text, got, tt.want)
		}
	}
}

// gpgKey makes an OpenPGP signing key with gpg and returns it armored,
// encrypted with passphrase.
func gpgKey(t *testing.T, passphrase string) string {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Skip("gpg is not installed (Debian package gnupg; make deps)")
	}
	// gpg-agent's socket path must stay short: not under t.TempDir().
	home, err := os.MkdirTemp("", "gpg-")
	if err != nil {
		t.Fatal(err)
	}
	// Fewer hash rounds than gpg's default keep decryption fast.
	if err := os.WriteFile(filepath.Join(home, "gpg-agent.conf"), []byte("s2k-count 65536\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GNUPGHOME="+home)
	t.Cleanup(func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = env
		_ = kill.Run()
		_ = os.RemoveAll(home)
	})
	run := func(args ...string) string {
		cmd := exec.Command("gpg", append([]string{"--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", passphrase}, args...)...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	run("--quick-gen-key", "Bot <bot@example.com>", "ed25519", "sign", "never")
	return run("--armor", "--export-secret-keys", "bot@example.com")
}
