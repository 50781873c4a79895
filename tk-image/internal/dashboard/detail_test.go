package dashboard

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// One batch job carries the updates of web (its leader), api and docs:
// each automation's page lists it as its own job, with its own outcome
// (Succeeded with the batch's commit and its own files, or Failed with its
// own reason), and explain's account on the page says the same; the image
// page names the files each automation's own last job found the policy's
// markers in.
func TestPagesShowEachAutomationsOwnOutcomeOfABatch(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	autos := map[string]*imagev1.ImageUpdateAutomation{}
	var owners []metav1.OwnerReference
	for _, name := range []string{"web", "api", "docs"} {
		a := automation(t, ns, name, nil)
		autos[name] = a
		owners = append(owners, metav1.OwnerReference{APIVersion: imagev1.GroupVersion.String(), Kind: imagev1.ImageUpdateAutomationKind,
			Name: name, UID: a.UID, Controller: ptr(name == "web")})
	}
	update := func(name string) updatev1.UpdateSpec {
		return updatev1.UpdateSpec{Path: name, Setters: []updatev1.PolicySetter{{Policy: updatev1.PolicyKey(ns, name),
			ImageRef: meta.ImageRef{Name: "ghcr.io/org/" + name, Tag: "1.1.0"}}}}
	}
	changed := func(name string, files ...string) *updatev1.UpdateResult {
		r := &updatev1.UpdateResult{Markers: []updatev1.PolicyMarkers{{Policy: updatev1.PolicyKey(ns, name), Count: len(files), Files: files, Lines: []int{3}}}}
		for _, f := range files {
			r.Files = append(r.Files, meta.FileResult{Path: f})
		}
		return r
	}
	job := &updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1", OwnerReferences: owners},
		Spec: updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: "https://github.com/org/fleet.git"},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update:     update("web"),
			Commit:     updatev1.CommitSpec{Author: updatev1.CommitUser{Email: "bot@example.com"}},
			Members:    []updatev1.UpdateJobMember{{Automation: "api", UID: autos["api"].UID, Update: update("api")}, {Automation: "docs", UID: autos["docs"].UID, Update: update("docs")}},
		}}
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	commit := strings.Repeat("c", 40)
	start, end := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second)), metav1.NewTime(time.Now().Truncate(time.Second))
	job.Status = updatev1.UpdateJobStatus{Phase: updatev1.UpdateJobSucceeded, StartTime: &start, CompletionTime: &end,
		PushedCommit: commit, PushedRefs: []string{"refs/heads/main"}, Result: changed("web", "web.yaml", "web-2.yaml"),
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "web's change pushed", LastTransitionTime: end}},
		Members: []updatev1.MemberStatus{
			{UID: autos["api"].UID, Automation: "api", Phase: updatev1.UpdateJobSucceeded, PushedCommit: commit, Result: changed("api", "api.yaml"),
				Reason: "Succeeded", Message: "api's change pushed"},
			{UID: autos["docs"].UID, Automation: "docs", Phase: updatev1.UpdateJobFailed, Reason: updatev1.UpdateFailedReason, Message: "docs/site.yaml is not YAML"},
		}}
	if err := env.Client.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	for _, a := range autos {
		a.Status.LastJob = &imagev1.UpdateJobReference{Name: job.Name, UID: job.UID}
		if err := env.Client.Status().Update(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	repo := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		Spec: imagev1.ImageRepositorySpec{Image: "ghcr.io/org/api", Interval: metav1.Duration{Duration: time.Hour}}}
	policy := &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "api"},
			Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: "1.x"}}}}
	for _, obj := range []client.Object{repo, policy} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	base := serve(t, env.Config, Options{})

	jobRow := regexp.MustCompile(`(?s)<tr><th scope="row"><a href="/jobs/[^"]+/web-1">web-1</a></th>.*?</tr>`)
	commitLink := `href="https://github.com/org/fleet/commit/` + commit + `"`
	tests := []struct {
		automation string
		row        []string
		explain    string
	}{
		{"web", []string{"phase-Succeeded", commitLink, "2 files", "web&#39;s change pushed"}, "Last job:\tweb-1 (Succeeded)"},
		{"api", []string{"phase-Succeeded", commitLink, "1 file<", "api&#39;s change pushed"}, "Last job:\tweb-1 (Succeeded)"},
		{"docs", []string{"phase-Failed", "no commit yet", "docs/site.yaml is not YAML"}, "Last job:\tweb-1 (Failed)"},
	}
	for _, tt := range tests {
		t.Run(tt.automation, func(t *testing.T) {
			code, body := get(t, base+"/automations/"+ns+"/"+tt.automation)
			if code != http.StatusOK {
				t.Fatalf("automation page: %d\n%s", code, body)
			}
			row := jobRow.FindString(body)
			for _, want := range tt.row {
				if !strings.Contains(row, want) {
					t.Errorf("the job's row lacks %q:\n%s", want, row)
				}
			}
			// The page aligns explain's columns with spaces, as tk-image
			// explain does, and leaves no tab in them.
			label, value, _ := strings.Cut(tt.explain, "\t")
			if !regexp.MustCompile(regexp.QuoteMeta(label)+` {2,}`+regexp.QuoteMeta(value)).MatchString(body) || strings.Contains(body, label+"\t") {
				t.Errorf("explain's account on the page lacks %q", tt.explain)
			}
		})
	}

	code, body := get(t, base+"/images/"+ns+"/api")
	if code != http.StatusOK {
		t.Fatalf("image page: %d\n%s", code, body)
	}
	usedBy := regexp.MustCompile(`<li><a href="/automations/[^"]+/(\w+)">\w+</a>([^<]*(?:<code>[^<]*</code>\s*)*)</li>`)
	files := map[string]string{}
	for _, m := range usedBy.FindAllStringSubmatch(body, -1) {
		files[m[1]] = m[2]
	}
	if len(files) != 3 || !strings.Contains(files["api"], "<code>api.yaml:3</code>") || files["web"] != "" || files["docs"] != "" {
		t.Errorf("used by %q: want api with api.yaml:3 from its own result, web and docs without files", files)
	}
	// The job's own page, linked from each automation's: every automation
	// it carries with its own outcome, and the commit.
	if _, body := get(t, base+"/automations/"+ns+"/api"); !strings.Contains(body, `<a href="/jobs/`+ns+`/web-1">web-1</a>`) {
		t.Errorf("the automation page does not link its job")
	}
	code, body = get(t, base+"/jobs/"+ns+"/web-1")
	if code != http.StatusOK {
		t.Fatalf("job page: %d\n%s", code, body)
	}
	rows := regexp.MustCompile(`(?s)<tr><th scope="row"><a href="/automations/[^"]+/(\w+)">\w+</a></th><td data-label="Outcome"><span class="phase phase-(\w+)">`).FindAllStringSubmatch(body, -1)
	outcomes := map[string]string{}
	for _, m := range rows {
		outcomes[m[1]] = m[2]
	}
	if outcomes["web"] != "Succeeded" || outcomes["api"] != "Succeeded" || outcomes["docs"] != "Failed" || !strings.Contains(body, commit) {
		t.Errorf("job page outcomes %v (want web and api Succeeded, docs Failed) or no commit %s", outcomes, commit)
	}
}

// A verified policy's page says which attestations verified and what
// they said, and where the chosen image was built from; what the
// registry's attestations and labels said is escaped.
func TestPolicyPageShowsProvenance(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	repo := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		Spec: imagev1.ImageRepositorySpec{Image: "ghcr.io/org/api", Interval: metav1.Duration{Duration: time.Hour}}}
	policy := &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "api"},
			Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: "1.x"}}}}
	for _, obj := range []client.Object{repo, policy} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	rev := strings.Repeat("a", 40)
	policy.Status.LatestRef = &meta.ImageRef{Name: "ghcr.io/org/api", Tag: "1.1.0", Digest: "sha256:" + strings.Repeat("b", 64)}
	policy.Status.Verification = &imagev1.VerificationStatus{Digest: policy.Status.LatestRef.Digest, Signer: "key cosign.pub", Format: "bundle",
		Attestations: []meta.Attestation{{Name: "provenance", PredicateType: "https://slsa.dev/provenance/v1", Format: "bundle", Signer: "key cosign.pub",
			Builder: `https://ci.example.com/<script>alert("x")</script>`, SourceRepository: "github.com/org/api", SourceRef: "refs/heads/main", Revision: rev}}}
	policy.Status.LatestSource = &meta.ImageSource{URL: "https://github.com/org/api", Revision: rev, Verified: true}
	if err := env.Client.Status().Update(ctx, policy); err != nil {
		t.Fatal(err)
	}
	base := serve(t, env.Config, Options{})
	code, body := get(t, base+"/policies/"+ns+"/api")
	if code != http.StatusOK {
		t.Fatalf("policy page: %d\n%s", code, body)
	}
	for _, want := range []string{
		`<dt>Attested</dt><dd>provenance <span class="muted">(https://slsa.dev/provenance/v1, bundle)</span> signed by key cosign.pub: built from <code>github.com/org/api</code> refs/heads/main at <code>` + rev + `</code> by https://ci.example.com/&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</dd>`,
		`<dt>Built from</dt><dd><a href="https://github.com/org/api" rel="noopener noreferrer">https://github.com/org/api</a> at <code>` + rev + `</code> <span class="muted">(verified provenance)</span></dd>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the policy page lacks\n%s\n", want)
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Error("the page lets a script through")
	}
}
