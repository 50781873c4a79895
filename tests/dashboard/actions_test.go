package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// buttonRef is one action button of a page: its group's id
// (act/RESOURCE/NAMESPACE/NAME) and its action.
type buttonRef struct {
	Group, Action string
}

func (b buttonRef) object() (resource string, key client.ObjectKey) {
	parts := strings.Split(b.Group, "/")
	return parts[1], client.ObjectKey{Namespace: parts[2], Name: parts[3]}
}

func (b buttonRef) js() string {
	return fmt.Sprintf(`document.getElementById(%q).querySelector('button[data-action=%q]')`, b.Group, b.Action)
}

func (b buttonRef) answer() string {
	return fmt.Sprintf(`document.getElementById(%q).querySelector("output.answer")`, b.Group)
}

// enabledButtons lists the page's enabled action buttons.
func enabledButtons(t *testing.T, tab context.Context) []buttonRef {
	t.Helper()
	js := eval[string](t, tab, `JSON.stringify(Array.from(document.querySelectorAll(".actions[id] button:not([disabled])")).map(b => ({Group: b.closest(".actions").id, Action: b.dataset.action})))`)
	var out []buttonRef
	if err := json.Unmarshal([]byte(js), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// objectState is what an action changes: spec.suspend and the reconcile
// request annotation.
type objectState struct {
	suspend          bool
	request, approve string
}

func stateOf(t *testing.T, c client.Client, resource string, key client.ObjectKey) objectState {
	t.Helper()
	var obj client.Object
	var suspend func() bool
	switch resource {
	case "imageupdateautomations":
		o := &imagev1.ImageUpdateAutomation{}
		obj, suspend = o, func() bool { return o.Spec.Suspend }
	case "imagepolicies":
		o := &imagev1.ImagePolicy{}
		obj, suspend = o, func() bool { return o.Spec.Suspend }
	case "imagerepositories":
		o := &imagev1.ImageRepository{}
		obj, suspend = o, func() bool { return o.Spec.Suspend }
	default:
		t.Fatalf("no action applies to %s", resource)
	}
	if err := c.Get(context.Background(), key, obj); err != nil {
		t.Fatal(err)
	}
	return objectState{suspend: suspend(), request: obj.GetAnnotations()[meta.ReconcileRequestAnnotation], approve: obj.GetAnnotations()[imagev1.ApproveAnnotation]}
}

// clickEveryButton clicks, as a person does, every enabled action button
// the page at url shows, including those a click brings (Resume after
// Suspend), once each; after each click it waits for the answer next to
// the button and checks in the API server that the object changed as the
// action says: a new reconcile request for Run now and Reconcile,
// spec.suspend for Suspend and Resume, the approval for Approve.
func clickEveryButton(t *testing.T, tab context.Context, c client.Client, url string) {
	t.Helper()
	navigate(t, tab, url)
	until(t, tab, time.Minute, "the page's buttons", `document.querySelector(".actions[id] button")`, "document.body.innerText")
	clicked := map[buttonRef]bool{}
	for range 40 {
		var next *buttonRef
		for _, b := range enabledButtons(t, tab) {
			if !clicked[b] {
				next = &b
				break
			}
		}
		if next == nil {
			break
		}
		b := *next
		clicked[b] = true
		resource, key := b.object()
		before := stateOf(t, c, resource, key)
		seq := eval[string](t, tab, `(`+b.answer()+`.getAttribute("data-seq") || "")`)
		eval[bool](t, tab, b.js()+`.click() || true`)
		// The answer to this click: a new one, for this action, no
		// longer pending.
		until(t, tab, 30*time.Second, fmt.Sprintf("the answer to %s on %s", b.Action, b.Group),
			fmt.Sprintf(`(o => o && !o.hidden && o.getAttribute("data-seq") !== %q && o.getAttribute("data-action") === %q && !o.classList.contains("pending"))(%s)`, seq, b.Action, b.answer()),
			`(document.getElementById("`+b.Group+`")||document.body).outerHTML`)
		answer := eval[string](t, tab, b.answer()+`.innerText`)
		class := eval[string](t, tab, b.answer()+`.className`)
		if !strings.Contains(class, "done") {
			t.Errorf("%s on %s: refused: %s", b.Action, b.Group, answer)
			continue
		}
		after := stateOf(t, c, resource, key)
		switch b.Action {
		case "run", "reconcile":
			if after.request == before.request || after.request == "" {
				t.Errorf("%s on %s said %q, but wrote no new reconcile request (%q before, %q after)", b.Action, b.Group, answer, before.request, after.request)
			}
		case "approve":
			if after.approve == "" || after.request == before.request {
				t.Errorf("approve on %s said %q, but wrote approve %q and the request %q (was %q)", b.Group, answer, after.approve, after.request, before.request)
			}
		case "suspend":
			if !after.suspend {
				t.Errorf("suspend on %s said %q, but spec.suspend is false", b.Group, answer)
			}
		case "resume":
			if after.suspend || after.request == before.request {
				t.Errorf("resume on %s said %q, but spec.suspend is %v and the request %q (was %q)", b.Group, answer, after.suspend, after.request, before.request)
			}
		default:
			t.Errorf("unexpected action %q on %s", b.Action, b.Group)
		}
		t.Logf("%s: %s on %s: %s", url, b.Action, b.Group, answer)
		// The click's object changes, and the page redraws its buttons
		// from the watch: wait for the new ones (Resume for Suspend).
		if b.Action == "suspend" || b.Action == "resume" {
			want := map[string]string{"suspend": "resume", "resume": "suspend"}[b.Action]
			until(t, tab, 30*time.Second, "the "+want+" button of "+b.Group,
				fmt.Sprintf(`document.getElementById(%q) && document.getElementById(%q).querySelector('button[data-action=%q]')`, b.Group, b.Group, want),
				`document.body.innerText`)
		}
	}
	if len(clicked) < 2 {
		t.Errorf("%s: only %d buttons to click", url, len(clicked))
	}
	// What cannot act says why: a suspended object's Run now or
	// Reconcile is disabled until it is resumed.
	disabled := eval[string](t, tab, `Array.from(document.querySelectorAll(".actions[id] button[disabled]")).map(b => b.dataset.action + ": " + document.getElementById(b.getAttribute("aria-describedby")).innerText).join("\n")`)
	for _, line := range strings.Split(disabled, "\n") {
		if line != "" && !strings.Contains(line, "resume first") {
			t.Errorf("%s: a disabled button says %q", url, line)
		}
	}
}

// actWithoutScript clicks Reconcile on the image page with scripts
// disabled: the form posts to its own action URL, the dashboard answers
// with a page saying what it did and linking back, and the request is in
// the API server.
func actWithoutScript(t *testing.T, tab context.Context, c client.Client, base string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	script := func(disabled bool) error {
		_, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: disabled})
		return err
	}
	if err := script(true); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = script(false) }()
	navigate(t, tab, base+"/images/default/podinfo")
	key := client.ObjectKey{Namespace: "default", Name: "podinfo"}
	before := stateOf(t, c, "imagerepositories", key)
	if err := chromedp.Do(ctx,
		chromedp.Click(`#act\/imagerepositories\/default\/podinfo button[data-action="reconcile"]`),
		chromedp.WaitVisible(`p.result`)); err != nil {
		t.Fatalf("posting Reconcile without JavaScript: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(`p.result`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "imagerepositories default/podinfo: reconcile requested") {
		t.Errorf("the result page says %q", text)
	}
	if after := stateOf(t, c, "imagerepositories", key); after.request == before.request {
		t.Errorf("Reconcile without JavaScript wrote no request")
	}
	back, err := chromedp.Run(ctx, chromedp.AttributeValue(`#live p a`, "href"))
	if err != nil || back.Value != "/images/default/podinfo" {
		t.Errorf("the result page links back to %q (%v)", back.Value, err)
	}
}

// answerNearButton clicks Run now on the Fleet page 390 pixels wide,
// where each row is a card: the answer appears within the clicked card,
// just below the button.
func answerNearButton(t *testing.T, tab context.Context, base string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 800)); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = chromedp.Do(tab, chromedp.EmulateViewport(1280, 900)) }()
	navigate(t, tab, base+"/?namespace=default")
	b := buttonRef{Group: "act/imageupdateautomations/default/slow", Action: "run"}
	until(t, tab, time.Minute, "slow's Run now", b.js(), "document.body.innerText")
	eval[bool](t, tab, `(`+b.js()+`.scrollIntoView(), true)`)
	eval[bool](t, tab, b.js()+`.click() || true`)
	until(t, tab, 30*time.Second, "the answer", b.answer()+` && !`+b.answer()+`.hidden && !`+b.answer()+`.classList.contains("pending")`, "document.body.innerText")
	gap := eval[float64](t, tab, b.answer()+`.getBoundingClientRect().top - `+b.js()+`.getBoundingClientRect().bottom`)
	visible := eval[bool](t, tab, `(r => r.top >= 0 && r.bottom <= window.innerHeight)(`+b.answer()+`.getBoundingClientRect())`)
	if gap < 0 || gap > 120 || !visible {
		t.Errorf("at 390px the answer is %.0fpx below the button (visible: %v), want just below it, on screen", gap, visible)
	}
}

// failuresSayWhatToFix opens the failing automation from Fleet and the
// broken policy's page: each names the reason in words, since when, the
// object at fault and the next step; the policy's link to its missing
// ImageRepository opens a page saying so, not a raw 404.
func failuresSayWhatToFix(t *testing.T, tab context.Context, base string) {
	t.Helper()
	navigate(t, tab, base+"/?namespace=default")
	staging := row("a/default/staging")
	until(t, tab, 2*time.Minute, "staging failing", staging+` && `+staging+`.dataset.state === "failing"`, fmt.Sprintf(rowText, "a/default/staging"))
	for _, want := range []string{"AuthenticationFailed", "the server refused the credentials", "since ", "At fault: Secret default/git-staging",
		"kubectl -n default describe secret git-staging", "Next step: check the username and password"} {
		if got := eval[string](t, tab, staging+`.innerText`); !strings.Contains(got, want) {
			t.Errorf("the failing row lacks %q:\n%s", want, got)
		}
	}
	// Follow the row's link, as a person does.
	eval[bool](t, tab, staging+`.querySelector("th a").click() || true`)
	until(t, tab, time.Minute, "the staging page", `location.pathname === "/automations/default/staging" && document.querySelector(".why-box")`, "document.body.innerText")
	if got := eval[string](t, tab, `document.querySelector(".why-box").innerText`); !strings.Contains(got, "Secret default/git-staging") {
		t.Errorf("the automation page's account lacks the Secret:\n%s", got)
	}
	if events := eval[string](t, tab, `document.getElementById("events").parentElement.innerText`); strings.Contains(events, "No events") {
		t.Errorf("a failing automation has no events:\n%s", events)
	}
	navigate(t, tab, base+"/policies/default/canary")
	until(t, tab, time.Minute, "the canary policy's diagnosis", `document.querySelector(".culprit a")`, "document.body.innerText")
	eval[bool](t, tab, `document.querySelector(".culprit a").click() || true`)
	until(t, tab, time.Minute, "the missing repository's page", `location.pathname === "/images/default/canary" && document.querySelector("h1")`, "document.body.innerText")
	body := eval[string](t, tab, `document.body.innerText`)
	if !strings.Contains(body, "No ImageRepository default/canary exists") || strings.Contains(body, "Not Found: imagerepositories") {
		t.Errorf("the missing repository's page says:\n%s", body)
	}
}

// apiServerStopShowsABanner stops the API server (SIGSTOP: it holds its
// connections and answers nothing), and the open Fleet page shows a
// banner saying since when within 5 s, its rows marked stale; the
// Automation page opened meanwhile shows the cached object under the
// banner, not a gateway error; SIGCONT clears it.
func apiServerStopShowsABanner(t *testing.T, tab context.Context, env *chain.Env, base string) {
	t.Helper()
	pid, err := localenv.APIServerPID(env.Cluster.ControlPlane.APIServer.SecurePort)
	if err != nil {
		t.Fatal(err)
	}
	navigate(t, tab, base+"/?namespace=default")
	until(t, tab, time.Minute, "the page live", `document.getElementById("live-state").innerText === "live"`, `document.getElementById("live-state").innerText`)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	shown := until(t, tab, 10*time.Second, "the stale banner", `!document.getElementById("stale").hidden && document.getElementById("live").classList.contains("is-stale")`,
		`document.getElementById("stale").outerHTML`)
	if shown > 5*time.Second {
		t.Errorf("the banner came %s after the stop, want within 5s", shown)
	}
	t.Logf("FIGURES API server stop to banner: %s", shown.Round(10*time.Millisecond))
	banner := eval[string](t, tab, `document.getElementById("stale").innerText`)
	if !strings.Contains(banner, "has not answered since") {
		t.Errorf("the banner says %q", banner)
	}
	if state := eval[string](t, tab, `document.getElementById("live-state").innerText`); state == "live" {
		t.Errorf("the header says live while the API server is stopped")
	}
	navigate(t, tab, base+"/automations/default/fleet")
	until(t, tab, 40*time.Second, "the automation page from the cache", `document.querySelector("h1") && document.querySelector("h1").innerText.includes("default/fleet")`, "document.body.innerText")
	if body := eval[string](t, tab, `document.body.innerText`); strings.Contains(body, "Bad Gateway") || !strings.Contains(body, "has not answered since") {
		t.Errorf("with the API server stopped the automation page shows:\n%s", body)
	}
	resume()
	until(t, tab, 20*time.Second, "the banner cleared", `document.getElementById("stale").hidden && !document.getElementById("live").classList.contains("is-stale")`,
		`document.getElementById("stale").outerHTML`)
}

// approveInTheBrowser: dev's automation (fleet) ran 6.4.0 healthy, and
// the promotion policy podinfo-prod, approval Required, waits for a
// person. Its page shows Approve with the image; a click from a page
// drawn before another image came (its digest changed under it) is
// refused with the reason and approves nothing; a click on the current
// page approves the image as the dashboard's user, and the policy
// promotes it and says who approved.
func approveInTheBrowser(t *testing.T, tab context.Context, env *chain.Env, base string) {
	t.Helper()
	ctx := context.Background()
	c := env.Cluster.Client
	ks := chain.Kustomization("default", "apps-dev")
	if err := c.Create(ctx, ks); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	fleet := &imagev1.ImageUpdateAutomation{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet"}, fleet); err != nil || fleet.Status.AppliedRevision == "" {
		t.Fatalf("fleet has applied no revision: %v", err)
	}
	if err := chain.SetKustomization(ctx, c, "default", "apps-dev", true, fleet.Status.AppliedRevision); err != nil {
		t.Fatal(err)
	}
	navigate(t, tab, base+"/policies/default/podinfo-prod")
	group := `document.getElementById("act/imagepolicies/default/podinfo-prod")`
	button := group + `.querySelector('button[data-action="approve"]')`
	until(t, tab, 2*time.Minute, "the Approve button", button+` && !`+button+`.disabled`, "document.body.innerText")
	if label := eval[string](t, tab, button+`.innerText`); label != "Approve 6.4.0" {
		t.Errorf("the button says %q, want Approve 6.4.0", label)
	}
	if body := eval[string](t, tab, `document.getElementById("live").innerText`); !strings.Contains(body, "waits for an approval") {
		t.Errorf("the policy page does not say the image waits for an approval:\n%s", body)
	}
	prod := &imagev1.ImagePolicy{}
	key := client.ObjectKey{Namespace: "default", Name: "podinfo-prod"}

	// A page drawn for another image: refused, nothing written. In one
	// step: a live update may draw the group anew between two.
	eval[bool](t, tab, `(b => { b.form.querySelector('input[name="digest"]').value = "6.3.9"; b.click(); return true })(`+button+`)`)
	until(t, tab, 30*time.Second, "the refusal", group+`.querySelector("output.answer:not([hidden]):not(.pending)")`, group+`.outerHTML`)
	if msg := eval[string](t, tab, group+`.querySelector("output.answer").innerText`); !strings.Contains(msg, "is not the image waiting for approval") || !strings.Contains(msg, "Reload the page") {
		t.Errorf("a stale approval was answered %q", msg)
	}
	if err := c.Get(ctx, key, prod); err != nil || prod.Annotations[imagev1.ApproveAnnotation] != "" {
		t.Fatalf("a refused approval wrote %v (%v)", prod.Annotations, err)
	}

	navigate(t, tab, base+"/policies/default/podinfo-prod")
	until(t, tab, time.Minute, "the Approve button", button+` && !`+button+`.disabled`, "document.body.innerText")
	eval[bool](t, tab, button+`.click() || true`)
	until(t, tab, 30*time.Second, "the answer", group+`.querySelector("output.answer.done")`, group+`.outerHTML`)
	user := eval[string](t, tab, `document.querySelector(".who").innerText`)
	if err := c.Get(ctx, key, prod); err != nil {
		t.Fatal(err)
	}
	by := prod.Annotations[imagev1.ApprovedByAnnotation]
	if prod.Annotations[imagev1.ApproveAnnotation] != "6.4.0" || by == "" || !strings.Contains(user, by) {
		t.Errorf("the click wrote approve %q approved-by %q; want 6.4.0 by the header's user (%q)", prod.Annotations[imagev1.ApproveAnnotation], by, user)
	}
	until(t, tab, time.Minute, "the promotion, approved", fmt.Sprintf(`Array.from(document.querySelectorAll("#live dt")).some(d => d.innerText === "Approved" && d.nextElementSibling.innerText.includes(%q))`, "by "+by),
		`document.getElementById("live").innerText`)
	if n := eval[int](t, tab, `document.querySelectorAll('button[data-action="approve"]').length`); n != 0 {
		t.Errorf("%d Approve buttons once the image is promoted", n)
	}
}
