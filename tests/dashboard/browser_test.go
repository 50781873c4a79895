package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// browser starts headless chromium for the test and returns a tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "chromium (apt-get install -y chromium, which make deps runs)", "browser-tools")
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless, chromedp.WindowSize(1280, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first run starts the browser, which lives as long as tab.
	if err := chromedp.Do(tab, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return tab
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// until polls a JavaScript predicate in the page every 20ms; what says
// what is awaited, and text what the page showed when it timed out.
func until(t *testing.T, tab context.Context, timeout time.Duration, what, predicate, text string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, err := chromedp.Run(tab, chromedp.Evaluate[bool]("Boolean("+predicate+")"))
		if err == nil && ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			shown, _ := chromedp.Run(tab, chromedp.Evaluate[string](text))
			t.Fatalf("%s: not within %s (%v); the page shows:\n%s", what, timeout, err, shown)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func navigate(t *testing.T, tab context.Context, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigating to %s: %v", url, err)
	}
}

const rowText = `(document.getElementById(%q)||{}).innerText`

func row(id string) string { return fmt.Sprintf(`document.getElementById(%q)`, id) }

// One chain, one browser: the Fleet page follows a tag push without a
// reload up to the commit link; a minimum age shows its time left; a
// ServiceAccount without rights sees its action refused; read-only has no
// actions; every page at 1280 and 390 pixels is screenshot and checked by
// axe-core.
func TestDashboardInABrowser(t *testing.T) {
	tab := browser(t)
	axe := axeSource(t)
	tk := tkImage(t)
	ctx := mustContext(t, 10*time.Minute)
	root := repoRoot(t)
	bin, err := localenv.Binaries(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := say(t)
	env, err := chain.Start(ctx, t.TempDir(), bin, []string{"6.3.0"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := env.Cluster.KubectlCmd(context.Background(), "get", "updatejobs,imageupdateautomations,imagepolicies", "-A", "-o", "yaml").CombinedOutput()
			t.Logf("objects at the failure:\n%s", out)
			for name, p := range env.Procs {
				t.Logf("%s log: %s", name, p.LogPath)
			}
		}
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Apply(ctx, samples+"\n---\n"+extraObjects(env.RepoURL)); err != nil {
		t.Fatal(err)
	}
	c := env.Cluster.Client
	base := dashboard(t, tk, env.Cluster.Kubeconfig)
	log("dashboard at " + base)

	fleetRow := "a/default/fleet"
	navigate(t, tab, base+"/?namespace=default")
	until(t, tab, 2*time.Minute, "the sample automation up to date at 6.3.0",
		row(fleetRow)+` && `+row(fleetRow)+`.dataset.state === "up-to-date" && `+row(fleetRow)+`.innerText.includes("6.3.0")`,
		"document.body.innerText")
	// A page that reloads loses this mark.
	eval[bool](t, tab, `window.__noReload = true`)

	log("pushing 6.4.0")
	if err := env.PushTag(ctx, "6.4.0"); err != nil {
		t.Fatal(err)
	}
	if err := env.RequestReconcile(ctx, &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "podinfo"}}); err != nil {
		t.Fatal(err)
	}
	seen := until(t, tab, 2*time.Minute, "6.4.0 on the Fleet page without a reload",
		`window.__noReload && `+row(fleetRow)+`.innerText.includes("6.4.0")`, fmt.Sprintf(rowText, fleetRow))
	log(fmt.Sprintf("6.4.0 shown %.1fs after the push", seen.Seconds()))
	until(t, tab, 2*time.Minute, "the pushed commit on the Fleet page without a reload",
		`window.__noReload && `+row(fleetRow)+`.querySelector("code.commit") && `+row(fleetRow)+`.dataset.state === "up-to-date"`,
		fmt.Sprintf(rowText, fleetRow))
	// The chain's git server is plain git http-backend, which has no
	// commit pages: the commit is named, not linked.
	head := env.Head("main")
	if shown := eval[string](t, tab, row(fleetRow)+`.querySelector("code.commit").innerText`); !strings.HasPrefix(head, shown) {
		t.Errorf("the commit shown, %s, is not the branch head %s", shown, head)
	}
	if n := eval[int](t, tab, row(fleetRow)+`.querySelectorAll("a.commit").length`); n != 0 {
		t.Errorf("%d commit links for a git server without commit pages", n)
	}
	if changed := eval[string](t, tab, row(fleetRow)+`.querySelector(".changed").innerText`); !strings.Contains(changed, "6.3.0 → 6.4.0") {
		t.Errorf("the Fleet row's last change %q does not say 6.3.0 → 6.4.0", changed)
	}

	// The slow automation's policy waits two hours for its tags.
	slow := "a/default/slow"
	until(t, tab, 2*time.Minute, "the minimum age's time left",
		row(slow)+` && /minimum age/.test(`+row(slow)+`.innerText) && /old enough in (1h5\dm|2h)/.test(`+row(slow)+`.innerText) && `+row(slow)+`.querySelector("time[data-until]")`,
		fmt.Sprintf(rowText, slow))

	for _, p := range []struct{ name, path, shown string }{
		{"the Fleet page", "/?namespace=default", row("a/default/quiet")},
		{"an Automation page", "/automations/default/quiet", `document.getElementById("live")`},
	} {
		latency := watchToScreen(t, tab, c, base+p.path, p.shown)
		t.Logf("FIGURES watch-to-screen latency (status update to %s, debounce 200ms): p50 %s, p95 %s, max %s over %d changes",
			p.name, latency[len(latency)/2], latency[len(latency)*95/100], latency[len(latency)-1], len(latency))
	}

	pages := []struct{ name, path string }{
		{"fleet", "/?namespace=default"}, {"automation", "/automations/default/fleet"},
		{"image", "/images/default/podinfo"}, {"policy", "/policies/default/podinfo"}, {"webhooks", "/webhooks"},
		{"failing-automation", "/automations/default/staging"}, {"broken-policy", "/policies/default/canary"},
	}
	fleet := &imagev1.ImageUpdateAutomation{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet"}, fleet); err != nil || fleet.Status.LastJob == nil {
		t.Fatalf("the fleet automation's last job: %v", err)
	}
	pages = append(pages, struct{ name, path string }{"job", "/jobs/default/" + fleet.Status.LastJob.Name})
	shots := screenshotDir(t)
	for _, p := range pages {
		checkPage(t, tab, p.name, base+p.path, axe, shots)
	}

	// The job page names the files its commit changed as the commit
	// does, from the repository's root, though the UpdateJob's status
	// names them from the automation's update path (./clusters/prod).
	navigate(t, tab, base+"/jobs/default/"+fleet.Status.LastJob.Name)
	if file := eval[string](t, tab, `(document.querySelector('td[data-label="File"] code')||{}).innerText||""`); file != chain.ManifestPath {
		t.Errorf("the job page's file column says %q, want %q (from the repository's root)", file, chain.ManifestPath)
	}
	if object := eval[string](t, tab, `(document.querySelector('td[data-label="Object"]')||{}).innerText||""`); !strings.HasPrefix(object, "Deployment/") {
		t.Errorf("the job page's object column says %q, want Deployment/[namespace/]name", object)
	}

	t.Run("approve a promotion", func(t *testing.T) {
		approveInTheBrowser(t, tab, env, base)
	})

	t.Run("every action button", func(t *testing.T) {
		for _, p := range pages[:4] {
			clickEveryButton(t, tab, c, base+p.path)
		}
	})

	t.Run("an action without JavaScript", func(t *testing.T) {
		actWithoutScript(t, tab, c, base)
	})

	t.Run("the answer next to the clicked button at 390px", func(t *testing.T) {
		answerNearButton(t, tab, base)
	})

	t.Run("failures name the object at fault and the next step", func(t *testing.T) {
		failuresSayWhatToFix(t, tab, base)
	})

	t.Run("an API server stop shows a banner", func(t *testing.T) {
		apiServerStopShowsABanner(t, tab, env, base)
	})

	t.Run("forbidden action as a ServiceAccount", func(t *testing.T) {
		kc := viewerKubeconfig(t, ctx, env)
		viewer := dashboard(t, tk, kc)
		navigate(t, tab, viewer+"/?namespace=default")
		until(t, tab, time.Minute, "the Fleet page as the viewer", row(fleetRow), "document.body.innerText")
		if who := eval[string](t, tab, `document.querySelector(".who").innerText`); !strings.Contains(who, "system:serviceaccount:default:dashboard-viewer") {
			t.Errorf("the header does not name the ServiceAccount: %q", who)
		}
		// The authorizer says before any click that the viewer may not
		// patch: every button of the row is disabled, with the reason.
		group := `document.getElementById("act/imageupdateautomations/default/fleet")`
		if n := eval[int](t, tab, group+`.querySelectorAll("button:not([disabled])").length`); n != 0 {
			t.Errorf("%d buttons enabled for a viewer who may not patch", n)
		}
		if why := eval[string](t, tab, group+`.querySelector(".why").innerText`); !strings.Contains(why, "your credentials may not patch imageupdateautomations in namespace default") {
			t.Errorf("the disabled buttons say %q", why)
		}
		// A post anyway (a role revoked after the page was drawn) shows
		// the API server's refusal next to the buttons.
		// In one step: a live update may draw the group anew between two.
		eval[bool](t, tab, `(b => { b.disabled = false; b.click(); return true })(`+group+`.querySelector('button[data-action="suspend"]'))`)
		until(t, tab, 30*time.Second, "the refusal", group+`.querySelector("output.answer:not([hidden])") && `+group+`.querySelector("output.answer").innerText.includes("Forbidden")`,
			group+`.outerHTML`)
		msg := eval[string](t, tab, group+`.querySelector("output.answer").innerText`)
		for _, want := range []string{"your credentials may not suspend", "cannot patch resource \"imageupdateautomations\"", "dashboard-viewer"} {
			if !strings.Contains(msg, want) {
				t.Errorf("refusal %q lacks %q", msg, want)
			}
		}
		a := &imagev1.ImageUpdateAutomation{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet"}, a); err != nil || a.Spec.Suspend {
			t.Errorf("the automation is suspended after a refused action (%v)", err)
		}
	})

	t.Run("read-only has no action buttons", func(t *testing.T) {
		ro := dashboard(t, tk, env.Cluster.Kubeconfig, "--read-only")
		for _, p := range pages[:3] {
			navigate(t, tab, ro+p.path)
			until(t, tab, time.Minute, "the page", `document.getElementById("live")`, "document.body.innerText")
			n := eval[int](t, tab, `document.querySelectorAll('form[method="post"], .actions button').length`)
			if n != 0 {
				t.Errorf("%s: %d action forms or buttons in read-only mode", p.path, n)
			}
			if !strings.Contains(eval[string](t, tab, `document.querySelector(".who").innerText`), "read-only") {
				t.Errorf("%s does not say read-only", p.path)
			}
		}
	})
}

// watchToScreen changes a suspended automation's status (its controller
// leaves it alone) twenty times and measures until the page at url shows
// each change in the element shown, sorted.
func watchToScreen(t *testing.T, tab context.Context, c client.Client, url, shown string) []time.Duration {
	t.Helper()
	navigate(t, tab, url)
	until(t, tab, time.Minute, "the quiet automation", shown, "document.body.innerText")
	ctx := context.Background()
	var out []time.Duration
	for i := range 20 {
		a := &imagev1.ImageUpdateAutomation{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "quiet"}, a); err != nil {
			t.Fatal(err)
		}
		commit := fmt.Sprintf("%08x%032x", 0xc0ffee00+i, 0)
		a.Status.LastPushCommit = commit
		start := time.Now()
		if err := c.Status().Update(ctx, a); err != nil {
			t.Fatal(err)
		}
		until(t, tab, 30*time.Second, "a status change", shown+`.innerText.includes("`+commit[:10]+`")`, shown+`.innerText`)
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

// extraObjects are, beside the samples: an automation whose policy waits a
// minimum age of two hours for every tag (on branch slow), a suspended one
// for the latency figure, one whose git Secret has a wrong password
// (staging), a policy whose ImageRepository does not exist (canary), and
// an ImageWebhook for the Webhooks page.
func extraObjects(repoURL string) string {
	automation := func(name, extra string) string {
		return chain.Automation(repoURL, name, "git-credentials", extra)
	}
	return chain.KustomizationCRD + `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: podinfo-prod
spec:
  imageRepositoryRef:
    name: podinfo
  policy:
    promotion:
      from: {automation: fleet}
      healthOf:
      - {apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, name: apps-dev}
      approval: Required
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: podinfo-slow
  labels:
    lane: slow
spec:
  imageRepositoryRef:
    name: podinfo
  policy:
    semver:
      range: ">=6.0.0"
  minimumAge:
    duration: 2h
---
` + automation("slow", `  policySelector:
    matchLabels:
      lane: slow
`) + `---
` + automation("quiet", `  suspend: true
  policySelector:
    matchLabels:
      lane: none
`) + `---
` + chain.Broken(repoURL) + `---
apiVersion: v1
kind: Secret
metadata:
  name: registry-webhook
stringData:
  token: not-a-secret
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageWebhook
metadata:
  name: registry
spec:
  type: distribution
  secretRef:
    name: registry-webhook
`
}

// viewerKubeconfig makes a ServiceAccount that may read the image-toolkit
// kinds and events but change nothing, and a kubeconfig with its token.
func viewerKubeconfig(t *testing.T, ctx context.Context, env *chain.Env) string {
	t.Helper()
	c := env.Cluster.Client
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dashboard-viewer"}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "dashboard-viewer"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"image.toolkit.dev", "update.toolkit.dev"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dashboard-viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "dashboard-viewer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "dashboard-viewer"}}}
	for _, o := range []client.Object{sa, role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(env.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "dashboard-viewer",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: env.Cluster.Config.Host, CertificateAuthorityData: env.Cluster.Config.CAData}
	kc.AuthInfos["viewer"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["viewer"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "viewer", Namespace: "default"}
	kc.CurrentContext = "viewer"
	path := filepath.Join(t.TempDir(), "viewer.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// axeSource is axe-core as make browser-tools installed it from npm
// (tests/dashboard/axe/package-lock.json pins it).
func axeSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(binDir(t), "axe", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		testenv.Missing(t, "axe-core in bin/axe", "browser-tools")
	}
	return string(b)
}

// screenshotDir is $IMAGE_TOOLKIT_SCREENSHOTS, else a directory of the
// test's; the docs' screenshots are copied from there.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("IMAGE_TOOLKIT_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// checkPage loads a page at 1280 and 390 pixels wide, writes a full-page
// screenshot of each, and runs axe-core in it: no serious or critical
// violation.
func checkPage(t *testing.T, tab context.Context, name, url, axe, dir string) {
	t.Helper()
	for _, width := range []int64{1280, 390} {
		ctx, cancel := context.WithTimeout(tab, time.Minute)
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 900), chromedp.Navigate(url)); err != nil {
			cancel()
			t.Fatalf("%s at %dpx: %v", url, width, err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		cancel()
		if err != nil {
			t.Fatalf("screenshot of %s: %v", url, err)
		}
		file := filepath.Join(dir, fmt.Sprintf("dashboard-%s-%d.png", name, width))
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", file)
		if overflow := eval[bool](t, tab, `document.documentElement.scrollWidth > window.innerWidth + 1`); overflow {
			t.Errorf("%s at %dpx scrolls sideways", url, width)
		}
		eval[bool](t, tab, axe+"\n;true")
		ctx, cancel = context.WithTimeout(tab, time.Minute)
		res, err := chromedp.Run(ctx, chromedp.Evaluate[string](`axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify({passes: r.passes.length, violations: r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target.join(" ")).slice(0, 3)}))}))`,
			chromedp.EvalAwaitPromise))
		cancel()
		if err != nil {
			t.Fatalf("axe on %s: %v", url, err)
		}
		var axeResult struct {
			Passes     int
			Violations []struct {
				ID, Impact, Help string
				Nodes            []string
			}
		}
		if err := json.Unmarshal([]byte(res), &axeResult); err != nil {
			t.Fatal(err)
		}
		if axeResult.Passes == 0 {
			t.Errorf("axe on %s at %dpx checked nothing", url, width)
		}
		t.Logf("axe on %s at %dpx: %d rules passed, %d violated", url, width, axeResult.Passes, len(axeResult.Violations))
		for _, v := range axeResult.Violations {
			if v.Impact == "serious" || v.Impact == "critical" {
				t.Errorf("axe on %s at %dpx: %s %s: %s (%s)", url, width, v.Impact, v.ID, v.Help, strings.Join(v.Nodes, "; "))
			} else {
				t.Logf("axe on %s at %dpx: %s %s: %s", url, width, v.Impact, v.ID, v.Help)
			}
		}
	}
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	_ = chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900))
}

func ptr[T any](v T) *T { return &v }
