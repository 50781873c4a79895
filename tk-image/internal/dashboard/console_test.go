package dashboard

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// button finds the button of action in the group of the object at path
// (resource/namespace/name) on a page: its attributes, "" when absent.
func button(body, path string, action Action) string {
	group := regexp.MustCompile(`(?s)<div class="actions" id="act/` + regexp.QuoteMeta(path) + `">.*?</div>`).FindString(body)
	return regexp.MustCompile(`<form method="post" action="/actions/` + string(action) + `/` + regexp.QuoteMeta(path) + `">.*?<button [^>]*>`).FindString(group)
}

// Each button is a form of its own posting to its own action URL; a
// suspended automation's Run now is disabled and says to resume first,
// while Resume is its primary button.
func TestButtonsPostToTheirOwnURLAndSayWhyTheyCannotAct(t *testing.T) {
	ns := env.Namespace(t)
	automation(t, ns, "live", nil)
	automation(t, ns, "paused", func(a *imagev1.ImageUpdateAutomation) { a.Spec.Suspend = true })
	base := serve(t, env.Config, Options{})
	_, body := get(t, base+"/?namespace="+ns)
	run := button(body, "imageupdateautomations/"+ns+"/live", ActionRun)
	if run == "" || strings.Contains(run, "disabled") || strings.Contains(run, "formaction") {
		t.Errorf("live's Run now: %q, want an enabled button in a form of its own", run)
	}
	if b := button(body, "imageupdateautomations/"+ns+"/live", ActionSuspend); b == "" || strings.Contains(b, "disabled") {
		t.Errorf("live's Suspend: %q", b)
	}
	run = button(body, "imageupdateautomations/"+ns+"/paused", ActionRun)
	if !strings.Contains(run, "disabled") || !strings.Contains(run, `aria-describedby="act/imageupdateautomations/`+ns+`/paused/why0"`) {
		t.Errorf("paused's Run now: %q, want disabled and described", run)
	}
	if !strings.Contains(body, `id="act/imageupdateautomations/`+ns+`/paused/why0">resume first`) {
		t.Errorf("the page does not say to resume first")
	}
	if b := button(body, "imageupdateautomations/"+ns+"/paused", ActionResume); b == "" || strings.Contains(b, "disabled") || strings.Contains(b, "secondary") {
		t.Errorf("paused's Resume: %q, want the enabled primary button", b)
	}
}

// A user who may read but not patch sees every button disabled, with the
// authorizer's answer, before clicking.
func TestButtonsOfAUserWhoMayNotPatchAreDisabled(t *testing.T) {
	ns := env.Namespace(t)
	automation(t, ns, "apps", nil)
	base := serve(t, viewer(t, ns).Config(), Options{})
	_, body := get(t, base+"/?namespace="+ns)
	for _, a := range []Action{ActionRun, ActionSuspend} {
		if b := button(body, "imageupdateautomations/"+ns+"/apps", a); !strings.Contains(b, "disabled") {
			t.Errorf("%s: %q, want disabled", a, b)
		}
	}
	if !strings.Contains(body, "your credentials may not patch imageupdateautomations in namespace "+ns) {
		t.Errorf("the page does not say why the buttons are disabled:\n%s", body)
	}
}

// An automation whose git server refuses the credentials says so in
// words, since when, names the Secret with the command that shows its
// keys, and which keys to check.
func TestFailingAutomationNamesItsSecretAndTheNextStep(t *testing.T) {
	ns := env.Namespace(t)
	automation(t, ns, "staging", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Repository.SecretRef = &meta.LocalObjectReference{Name: "git-staging"}
		a.Status.Conditions = []metav1.Condition{{Type: conditions.ReadyCondition, Status: metav1.ConditionFalse,
			Reason: conditions.AuthenticationFailedReason, Message: "UpdateJob staging-1 failed: fetch: 401 Unauthorized",
			LastTransitionTime: metav1.Now()}}
	})
	base := serve(t, env.Config, Options{})
	for _, page := range []string{"/?namespace=" + ns, "/automations/" + ns + "/staging"} {
		_, body := get(t, base+page)
		for _, want := range []string{"the server refused the credentials", "since <time", "401 Unauthorized",
			"At fault: Secret " + ns + "/git-staging", "kubectl -n " + ns + " describe secret git-staging",
			"Next step: check the username and password (or bearerToken) keys of Secret " + ns + "/git-staging"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s lacks %q", page, want)
			}
		}
	}
}

// A policy has a page of its own; one whose ImageRepository does not
// exist links it as the object at fault, and that link answers with a
// page saying it does not exist and who waits for it, not a raw 404.
func TestPolicyPageAndItsMissingRepository(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	p := &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "canary"},
		Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "canary"},
			Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = []metav1.Condition{{Type: conditions.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: conditions.DependencyNotReadyReason, Message: `imagerepositories.image.toolkit.dev "canary" not found`, LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	automation(t, ns, "apps", nil)
	base := serve(t, env.Config, Options{})
	code, body := get(t, base+"/policies/"+ns+"/canary")
	if code != http.StatusOK {
		t.Fatalf("policy page: %d\n%s", code, body)
	}
	for _, want := range []string{"ImagePolicy " + ns + "/canary", "semver", `At fault: <a href="/images/` + ns + `/canary">ImageRepository ` + ns + `/canary</a>`,
		"must exist and scan first", `data-action="reconcile"`, "Used by"} {
		if !strings.Contains(body, want) {
			t.Errorf("the policy page lacks %q", want)
		}
	}
	code, body = get(t, base+"/images/"+ns+"/canary")
	if code != http.StatusNotFound || !strings.Contains(body, "No ImageRepository "+ns+"/canary exists") ||
		!strings.Contains(body, `href="/policies/`+ns+`/canary"`) || strings.Contains(body, "Not Found: imagerepositories") {
		t.Errorf("missing repository page: %d\n%s", code, body)
	}
}
