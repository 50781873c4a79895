package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// explainCluster is a control plane with the image-toolkit CRDs and no
// controllers: the test writes the objects and their status as the
// controllers would, and a kubeconfig for an admin user.
type explainCluster struct {
	env        *testenv.Env
	kubeconfig string
}

func startExplainCluster(t *testing.T) *explainCluster {
	t.Helper()
	env, err := testenv.Start(testenv.AllCharts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	user, err := env.AddUser(envtest.User{Name: "explain-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return &explainCluster{env: env, kubeconfig: path}
}

// create writes obj, then its status through the status subresource.
func (c *explainCluster) create(t *testing.T, obj client.Object, status func()) {
	t.Helper()
	ctx := context.Background()
	if err := c.env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	if status != nil {
		status()
		if err := c.env.Client.Status().Update(ctx, obj); err != nil {
			t.Fatalf("writing the status of %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

func (c *explainCluster) explain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(t, "", append(append([]string{"explain"}, args...), "--kubeconfig", c.kubeconfig)...)
}

// mustContain checks that out holds each of wants, comparing text with
// runs of blanks as one space (the columns' width depends on the names).
func mustContain(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(squeeze(out), squeeze(w)) {
			t.Errorf("%s lacks %q:\n%s", what, w, out)
		}
	}
}

func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// explain policy and explain automation print, from the objects' status,
// why an image was or was not updated: the policy's tag breakdown and
// chosen image; the automation's policies (pending or applied), the branch
// head listed live with the repository's credentials against the head the
// last run saw, the last job, and the markers from its status or from a
// dry run over a local checkout, naming a marker whose policy does not
// exist and a selected policy no marker names. A missing object exits 1
// with the API's message; bad flags exit 2. A member of a batch is
// explained, and followed, with its own part of the batch.
func TestExplain(t *testing.T) {
	c := startExplainCluster(t)
	// The control plane is the test's own: a plain name reads well in the
	// output the README shows.
	ns := "apps"
	c.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, nil)
	key := func(name string) string { return updatev1.PolicyKey(ns, name) }
	marker := func(name string) string { return `# {"$imagepolicy": "` + key(name) + `"}` }

	srv := testgit.New(t, testgit.Options{Username: "bot", Password: "s3cret"})
	clone := srv.CreateRepo(t, "fleet", map[string]string{
		"deploy/app.yaml":  "image: ghcr.io/org/podinfo:6.4.0 " + marker("podinfo") + "\n",
		"deploy/typo.yaml": "image: ghcr.io/org/podinfo:6.4.0 " + marker("podinf") + "\n",
	})
	seen := "main@sha1:" + strings.TrimSpace(testgit.Git(t, srv.BarePath("fleet"), "rev-parse", "main"))
	clone.Commit("someone else", map[string]string{"README": "moved\n"})
	clone.Push()
	head := "main@sha1:" + strings.TrimSpace(testgit.Git(t, srv.BarePath("fleet"), "rev-parse", "main"))

	scanTime := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	repo := &imagev1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns},
		Spec:       imagev1.ImageRepositorySpec{Image: "ghcr.io/org/podinfo", Interval: metav1.Duration{Duration: time.Hour}},
	}
	c.create(t, repo, func() {
		repo.Status.CanonicalImageName = "ghcr.io/org/podinfo"
		repo.Status.ObservedExclusionList = []string{`^.*\.sig$`}
		repo.Status.LastScanResult = &imagev1.ScanResult{Revision: "sha256:0123456789abcdef0123", TagCount: 14, ExcludedCount: 2, ScanTime: scanTime}
		conditions.MarkReady(repo, conditions.SucceededReason, "successful scan: found 14 tags")
	})
	chosen := metav1.NewMicroTime(time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC))
	policy := func(name string, labels map[string]string, latest, previous string, sel *imagev1.TagSelection) {
		p := &imagev1.ImagePolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: imagev1.ImagePolicySpec{
				ImageRepositoryRef: meta.NamespacedObjectReference{Name: "podinfo"},
				Policy:             imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=6.0.0"}},
				FilterTags:         &imagev1.TagFilter{Pattern: `^app-(?P<v>.*)$`, Extract: "$v"},
			},
		}
		c.create(t, p, func() {
			p.Status.LastSelection = sel
			if latest != "" {
				p.Status.LatestRef = &meta.ImageRef{Name: "ghcr.io/org/" + name, Tag: latest}
				p.Status.LatestRefTime = &chosen
				conditions.MarkReady(p, conditions.SucceededReason, "latest image tag for ghcr.io/org/%s resolved to %s", name, latest)
			} else {
				conditions.MarkFailed(p, imagev1.NoMatchingTagReason, "no tag matches the policy")
			}
			if previous != "" {
				p.Status.ObservedPreviousRef = &meta.ImageRef{Name: "ghcr.io/org/" + name, Tag: previous}
			}
		})
	}
	web := map[string]string{"team": "web"}
	policy("podinfo", web, "app-6.5.0", "app-6.4.0", &imagev1.TagSelection{ScanRevision: "sha256:0123456789abcdef0123",
		Considered: 14, Filtered: 3, Unparsable: 1, OutOfRange: 2, Kept: 8,
		TopCandidates: []string{"app-6.5.0", "app-6.4.0", "app-6.3.1", "app-6.3.0", "app-6.2.0"}})
	policy("redis", web, "7.2.4", "", nil)
	policy("nightly", web, "", "", &imagev1.TagSelection{ScanRevision: "sha256:0123456789abcdef0123", Considered: 14, Unparsable: 14})
	policy("unselected", nil, "1.0.0", "", nil)
	signed := &imagev1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "signed", Namespace: ns},
		Spec: imagev1.ImagePolicySpec{
			ImageRepositoryRef: meta.NamespacedObjectReference{Name: "podinfo"},
			Policy:             imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=6.0.0"}},
			Verify: &imagev1.ImageVerification{Provider: imagev1.SignatureProviderCosign,
				MatchOIDCIdentity: []imagev1.OIDCIdentityMatch{{Issuer: "^https://token.actions.githubusercontent.com$", Subject: "^https://github.com/org/podinfo/"}},
				Attestations: []imagev1.AttestationRule{{Name: "provenance", PredicateType: "slsaprovenance1",
					SLSA: &imagev1.SLSAProvenanceMatch{SourceRepository: "github.com/org/*", SourceRef: "refs/tags/*"}}}},
		},
	}
	c.create(t, signed, func() {
		signed.Status.LatestRef = &meta.ImageRef{Name: "ghcr.io/org/podinfo", Tag: "6.4.0", Digest: "sha256:cccc"}
		signed.Status.Verification = &imagev1.VerificationStatus{Digest: "sha256:aaaa", PlatformDigest: "sha256:cccc", Format: "bundle", Skipped: 1,
			Signer: "subject https://github.com/org/podinfo/.github/workflows/release.yml@refs/tags/6.4.0 issued by https://token.actions.githubusercontent.com",
			Attestations: []meta.Attestation{{Name: "provenance", PredicateType: "https://slsa.dev/provenance/v1", Format: "bundle", Signer: "subject https://github.com/org/podinfo/.github/workflows/release.yml@refs/tags/6.4.0 issued by https://token.actions.githubusercontent.com",
				Builder: "https://github.com/actions/runner/github-hosted", SourceRepository: "github.com/org/podinfo", SourceRef: "refs/tags/6.4.0", Revision: "0123456789abcdef0123456789abcdef01234567"}}}
		signed.Status.UnverifiedRef = &imagev1.UnverifiedRef{Tag: "6.5.0", Digest: "sha256:bbbb", Reason: "ProvenanceMismatch",
			Message: "attestation provenance (https://slsa.dev/provenance/v1): source repository github.com/evil/fork does not match github.com/org/*"}
		conditions.MarkReady(signed, imagev1.SignatureVerificationFailedReason, "latest image tag for ghcr.io/org/podinfo resolved to 6.4.0")
	})

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git-auth", Namespace: ns},
		StringData: map[string]string{"username": "bot", "password": "s3cret"}}
	c.create(t, secret, nil)
	job := &updatev1.UpdateJob{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-0123456789", Namespace: ns},
		Spec: updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: srv.RepoURL("fleet"), SecretRef: &meta.LocalObjectReference{Name: "git-auth"}},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update: updatev1.UpdateSpec{Path: "deploy", Setters: []updatev1.PolicySetter{
				{Policy: key("podinfo"), ImageRef: meta.ImageRef{Name: "ghcr.io/org/podinfo", Tag: "app-6.4.0"}},
				{Policy: key("redis"), ImageRef: meta.ImageRef{Name: "ghcr.io/org/redis", Tag: "7.2.4"}},
			}},
			Commit: updatev1.CommitSpec{Author: updatev1.CommitUser{Email: "bot@example.com"}},
		},
	}
	finished := metav1.NewTime(time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC))
	c.create(t, job, func() {
		job.Status.Phase = updatev1.UpdateJobNoChange
		job.Status.CheckoutRevision = seen
		job.Status.CompletionTime = &finished
		job.Status.Result = &updatev1.UpdateResult{
			Markers: []updatev1.PolicyMarkers{
				{Policy: key("podinf"), Count: 1, Files: []string{"typo.yaml"}, Unknown: true},
				{Policy: key("podinfo"), Count: 1, Files: []string{"app.yaml"}},
			},
			UnmarkedPolicies: []string{key("redis")},
		}
		conditions.MarkReady(job, updatev1.NoChangeReason, "no change: the files already hold the policies' values")
	})
	auto := &imagev1.ImageUpdateAutomation{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns},
		Spec: imagev1.ImageUpdateAutomationSpec{
			Interval: metav1.Duration{Duration: time.Hour},
			GitSpec: imagev1.GitSpec{
				Repository: &job.Spec.Repository,
				Checkout:   &job.Spec.Checkout,
				Commit:     job.Spec.Commit,
			},
			PolicySelector: &metav1.LabelSelector{MatchLabels: web},
			Update:         &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: "deploy"},
		},
	}
	c.create(t, auto, func() {
		auto.Status.ObservedSourceRevision = seen
		auto.Status.ObservedPolicies = imagev1.ObservedPolicies{
			"podinfo": {Name: "ghcr.io/org/podinfo", Tag: "app-6.4.0"},
			"redis":   {Name: "ghcr.io/org/redis", Tag: "7.2.4"},
		}
		auto.Status.LastAutomationRunTime = &finished
		auto.Status.LastJob = &imagev1.UpdateJobReference{Name: job.Name, UID: job.UID, Phase: updatev1.UpdateJobNoChange}
		conditions.MarkReady(auto, conditions.SucceededReason, "no change needed at %s (UpdateJob %s)", seen, job.Name)
	})

	// The verification step: who signed the chosen digest, and why the
	// better tag was not chosen.
	t.Run("verified policy", func(t *testing.T) {
		code, out, errs := c.explain(t, "policy", "signed", "-n", ns)
		if code != 0 {
			t.Fatalf("code %d, stderr %q", code, errs)
		}
		t.Logf("tk-image explain policy signed:\n%s", out)
		mustContain(t, "explain policy signed", out,
			"Verification:     cosign signatures, trusting keyless: subject ^https://github.com/org/podinfo/ issued by ^https://token.actions.githubusercontent.com$ (the public Sigstore root)\n",
			"  Verified:       sha256:aaaa, signed by subject https://github.com/org/podinfo/.github/workflows/release.yml@refs/tags/6.4.0 issued by https://token.actions.githubusercontent.com (bundle signature)\n",
			"  Platform:       sha256:cccc, the platform's manifest in the verified index, is written\n",
			"  Requires:       attestation provenance of type slsaprovenance1, source repository github.com/org/*, source ref refs/tags/*\n",
			"  Attested:       provenance (https://slsa.dev/provenance/v1, bundle) signed by subject https://github.com/org/podinfo/.github/workflows/release.yml@refs/tags/6.4.0 issued by https://token.actions.githubusercontent.com: built by https://github.com/actions/runner/github-hosted from github.com/org/podinfo refs/tags/6.4.0 at 0123456789abcdef0123456789abcdef01234567\n",
			"  Skipped:        1 better candidate(s) did not verify\n",
			"  Not verified:   6.5.0 (sha256:bbbb): ProvenanceMismatch: attestation provenance (https://slsa.dev/provenance/v1): source repository github.com/evil/fork does not match github.com/org/*",
			"SignatureVerificationFailed")
	})

	t.Run("policy", func(t *testing.T) {
		code, out, errs := c.explain(t, "policy", "podinfo", "-n", ns)
		if code != 0 {
			t.Fatalf("code %d, stderr %q", code, errs)
		}
		t.Logf("tk-image explain policy podinfo:\n%s", out)
		mustContain(t, "explain policy", out,
			"ImagePolicy:      "+ns+"/podinfo\n",
			`Rules:            semver range ">=6.0.0": the highest version in range; only tags matching "^app-(?P<v>.*)$", ordered by "$v"`,
			"ImageRepository:  "+ns+"/podinfo (ghcr.io/org/podinfo)\n",
			"  Last scan:      2026-03-01T12:00:00Z, revision sha256:0123456789ab\n",
			`  Tags:           14 kept, 2 dropped by the exclusionList ("^.*\\.sig$")`,
			"Last selection:   of scan sha256:0123456789ab (the repository's last)\n",
			"  Considered:     14 tags\n",
			`  Filtered out:   3 not matching "^app-(?P<v>.*)$"`,
			"  Not a version:  1 ",
			`  Out of range:   2 outside ">=6.0.0"`,
			"  Kept:           8\n",
			"  Best first:     app-6.5.0, app-6.4.0, app-6.3.1, app-6.3.0, app-6.2.0\n",
			"Latest image:     ghcr.io/org/podinfo:app-6.5.0\n",
			"  Chosen:         2026-03-01T12:00:01Z\n",
			"  Previous:       ghcr.io/org/podinfo:app-6.4.0\n",
			"Ready:            True, Succeeded: latest image tag for ghcr.io/org/podinfo resolved to app-6.5.0\n")

		// No tag left: the breakdown says why not.
		_, out, _ = c.explain(t, "policy", "nightly", "-n", ns)
		mustContain(t, "explain policy nightly", out, "  Not a version:  14 ", "  Kept:           0\n",
			"Selected:       nothing: no tag is left", "Latest image:     none chosen yet", "Ready:            False, NoMatchingTag")

		code, out, _ = c.explain(t, "policy", "podinfo", "-n", ns, "-o", "json")
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got["selectionIsCurrent"] != true {
			t.Errorf("-o json: code %d, %v:\n%s", code, err, out)
		}
	})

	t.Run("automation from the last job", func(t *testing.T) {
		code, out, errs := c.explain(t, "automation", "fleet", "-n", ns)
		if code != 0 {
			t.Fatalf("code %d, stderr %q", code, errs)
		}
		t.Logf("tk-image explain automation fleet:\n%s", out)
		mustContain(t, "explain automation", out,
			"ImageUpdateAutomation:  "+ns+"/fleet\n",
			"Repository:             "+srv.RepoURL("fleet")+" (spec.git.repository)\n",
			"  Checkout:             branch main\n",
			"  Update path:          deploy\n",
			"  Branch head:          "+head+" (listed now)\n",
			"  Last run saw:         "+seen+": the branch moved since; the next run looks again\n",
			"Policies (ImagePolicies matching team=web):\n",
			key("nightly"), "none", "no latest image",
			key("podinfo"), "ghcr.io/org/podinfo:app-6.5.0", "ghcr.io/org/podinfo:app-6.4.0", "pending", "1 (deploy/app.yaml)",
			key("redis"), "applied",
			"Last job:               fleet-0123456789 (NoChange)\n",
			"  Checked out:          "+seen+"\n",
			"Markers (from UpdateJob fleet-0123456789 status.result):\n",
			key("podinf")+" 1 deploy/typo.yaml", "no ImagePolicy "+ns+"/podinf exists",
			"Problems:\n",
			"  - 1 marker names "+key("podinf")+", but no ImagePolicy "+ns+"/podinf exists\n",
			"  - no marker names "+key("redis")+", so its image ghcr.io/org/redis:7.2.4 is written nowhere\n",
			"  - ImagePolicy "+ns+"/nightly has no latest image yet")
		if strings.Contains(out, "unselected") {
			t.Errorf("a policy the selector does not select is listed:\n%s", out)
		}
	})

	// explain selects policies as the controller does (pkg/selection): a
	// policy the selector leaves out is still applied when it follows an
	// image the automation discovered, so explain lists it.
	t.Run("automation following a discovered image", func(t *testing.T) {
		onboard := auto.DeepCopy()
		onboard.ObjectMeta = metav1.ObjectMeta{Name: "onboard", Namespace: ns}
		onboard.Status = imagev1.ImageUpdateAutomationStatus{}
		onboard.Spec.Discover = &imagev1.DiscoverSpec{}
		c.create(t, onboard, func() {
			onboard.Status.Discovered = []imagev1.DiscoveredImage{
				{DiscoveredImage: meta.DiscoveredImage{ImageRef: meta.ImageRef{Name: "ghcr.io/org/unselected", Tag: "0.9.0"}, Locations: 1, Policy: "unselected"}},
			}
		})
		code, out, errs := c.explain(t, "automation", "onboard", "-n", ns)
		if code != 0 {
			t.Fatalf("code %d, stderr %q", code, errs)
		}
		mustContain(t, "explain automation onboard", out, key("unselected"), "ghcr.io/org/unselected:1.0.0", key("podinfo"))
	})

	t.Run("automation scanning a checkout", func(t *testing.T) {
		dir := t.TempDir()
		files := map[string]string{
			"deploy/app.yaml":   "image: ghcr.io/org/podinfo:app-6.4.0 " + marker("podinfo") + "\n",
			"deploy/other.yaml": "a: x:1 " + marker("unselected") + "\nb: y:1 " + marker("redis") + "\n",
			"elsewhere.yaml":    "image: x:1 " + marker("gone") + "\n",
		}
		for p, body := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		code, out, errs := c.explain(t, "automation", "fleet", "-n", ns, "--scan-checkout", dir)
		if code != 0 {
			t.Fatalf("code %d, stderr %q", code, errs)
		}
		t.Logf("tk-image explain automation fleet --scan-checkout DIR:\n%s", out)
		mustContain(t, "explain automation --scan-checkout", out,
			"Markers (from a dry run of the setters over "+filepath.Join(dir, "deploy")+"):\n",
			"deploy/app.yaml:1", "deploy/other.yaml:1", "deploy/other.yaml:2",
			// fleet does not select unselected, but onboard (above)
			// follows it: the marker is onboard's, not a problem.
			"(applied by automation onboard)",
			"A run would change:\n",
			"    deploy/app.yaml: ghcr.io/org/podinfo:app-6.4.0 -> ghcr.io/org/podinfo:app-6.5.0 ("+key("podinfo")+")\n",
			"    deploy/other.yaml: y:1 -> ghcr.io/org/redis:7.2.4 ("+key("redis")+")\n")
		// The update path bounds the scan, as it bounds a job.
		if strings.Contains(out, "gone") || strings.Contains(out, "no marker names "+key("redis")) {
			t.Errorf("the scan saw outside the update path, or missed redis:\n%s", out)
		}
	})

	// variant creates an automation like fleet but for change, and
	// explains it.
	variant := func(t *testing.T, name string, change func(*imagev1.ImageUpdateAutomation)) string {
		t.Helper()
		a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: *auto.Spec.DeepCopy()}
		change(a)
		c.create(t, a, nil)
		code, out, errs := c.explain(t, "automation", name, "-n", ns)
		if code != 0 {
			t.Fatalf("code %d, stderr %q", code, errs)
		}
		return out
	}

	// Nothing recorded yet and a Secret missing: the explanation says what
	// it cannot know, and why, and goes on.
	t.Run("automation before its first run", func(t *testing.T) {
		out := variant(t, "fresh", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Repository.SecretRef = &meta.LocalObjectReference{Name: "no-such-secret"}
		})
		mustContain(t, "explain automation fresh", out,
			"Branch head: unknown: credentials: Secret "+ns+"/no-such-secret (the secretRef) not found\n",
			"Last run saw: nothing recorded yet\n",
			"Last run: never\n",
			"Ready: unknown: no Ready condition yet\n",
			key("podinfo")+" ghcr.io/org/podinfo:app-6.5.0 none pending unknown\n",
			"Last job: none finished yet\n",
			"Markers: unknown: no finished UpdateJob recorded them; --scan-checkout DIR finds them in a local checkout\n")
	})

	// explain resolves the source as the controller does (pkg/gitsource):
	// where the controller would stall, explain gives its reason, and
	// still shows what it resolved.
	t.Run("automation the controller cannot run", func(t *testing.T) {
		out := variant(t, "flux", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Name: "fleet"}
			a.Spec.GitSpec.Repository, a.Spec.GitSpec.Checkout = nil, nil
		})
		// This control plane has no Flux.
		mustContain(t, "explain automation flux", out,
			"Repository: unknown (GitRepository "+ns+"/fleet)\n",
			"Branch head: unknown: the GitRepository kind (source.toolkit.fluxcd.io/v1) is not installed\n")

		out = variant(t, "tag", func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.GitSpec.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1"}
		})
		mustContain(t, "explain automation tag", out,
			"Repository: "+srv.RepoURL("fleet")+" (spec.git.repository)\n",
			"  Checkout: tag v1\n",
			"Branch head: unknown: the checkout ref is not a branch, so there is no branch to push to: set spec.git.push.branch or spec.git.push.refspec\n")
	})

	// A repository whose credentials a provider issues (a GitHub App, an
	// Azure DevOps workload identity) is not listed: tk-image carries no
	// cloud SDK and has no controller's identity, and says so rather than
	// failing as if the provider were unknown.
	t.Run("automation with a credentials provider", func(t *testing.T) {
		for _, provider := range []string{"github", "azure"} {
			out := variant(t, "provider-"+provider, func(a *imagev1.ImageUpdateAutomation) {
				a.Spec.GitSpec.Repository.Provider = provider
			})
			mustContain(t, "explain automation with provider "+provider, out,
				"Branch head: unknown: not listed: provider "+provider+": credentials are issued by the controllers; "+
					"tk-image does not read cloud or GitHub App identities (the automation's Ready condition says whether its controller can list the branch)\n")
			if strings.Contains(out, "not one this program knows") {
				t.Errorf("provider %s: %s", provider, out)
			}
		}
	})

	// An automation that proposes pull requests shows its last one where
	// it talks about the last run and push: the address, the state its
	// job saw (and that explain asks no forge), what the job did and the
	// head branch; -o json has it as status.lastPullRequest has it.
	t.Run("automation proposing pull requests", func(t *testing.T) {
		const commit = "abc1234def5678abc1234def5678abc1234def56"
		tests := []struct {
			name  string
			pr    meta.PullRequestStatus
			push  string // status.lastPushCommit: the head branch's
			ready string
			wants []string
		}{
			{"proposer", meta.PullRequestStatus{URL: "https://git.example.com/org/fleet/pulls/3", Number: 3, State: meta.PullRequestOpen,
				HeadBranch: "image-toolkit/apps-proposer", HeadCommit: commit, Action: meta.PullRequestOpened},
				commit, "opened pull request #3 (UpdateJob proposer-0123456789): https://git.example.com/org/fleet/pulls/3", []string{
					"Last push: " + commit + " to the pull request's head branch at 2026-03-01T11:00:00Z\n",
					"Last pull request: #3 https://git.example.com/org/fleet/pulls/3\n",
					"  State: open when its job finished (explain asks no forge; closed unmerged since, it is proposed again only once the base branch or a policy changes)\n",
					"  Action: opened\n",
					"  Head branch: image-toolkit/apps-proposer at abc1234\n",
				}},
			{"closer", meta.PullRequestStatus{URL: "https://git.example.com/org/fleet/pulls/4", Number: 4, State: meta.PullRequestClosed,
				HeadBranch: "image-toolkit/apps-closer", Action: meta.PullRequestClosedNow},
				"", "no change needed at " + head + ": closed pull request #4 (UpdateJob closer-0123456789): https://git.example.com/org/fleet/pulls/4", []string{
					"Last pull request: #4 https://git.example.com/org/fleet/pulls/4\n",
					"  State: closed when its job finished\n",
					"  Action: closed: the base branch already had the policies' values\n",
					"  Head branch: image-toolkit/apps-closer\n",
				}},
		}
		for _, tt := range tests {
			a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Name: tt.name, Namespace: ns}, Spec: *auto.Spec.DeepCopy()}
			a.Spec.GitSpec.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Labels: []string{"automated"}}}
			c.create(t, a, func() {
				a.Status.LastAutomationRunTime = &finished
				a.Status.ObservedSourceRevision = head
				if tt.push != "" {
					a.Status.LastPushCommit, a.Status.LastPushTime = tt.push, &finished
				}
				a.Status.LastPullRequest = tt.pr.DeepCopy()
				conditions.MarkReady(a, conditions.SucceededReason, "%s", tt.ready)
			})
			code, out, errs := c.explain(t, "automation", tt.name, "-n", ns)
			if code != 0 {
				t.Fatalf("%s: code %d, stderr %q", tt.name, code, errs)
			}
			t.Logf("tk-image explain automation %s:\n%s", tt.name, out)
			mustContain(t, "explain automation "+tt.name, out, append([]string{"Last run: 2026-03-01T11:00:00Z\n"}, tt.wants...)...)
			// Where the explanation talks about the last run: before the
			// policies.
			if strings.Index(out, "Last pull request:") > strings.Index(out, "Policies (") {
				t.Errorf("the pull request is not with the last run:\n%s", out)
			}

			code, out, _ = c.explain(t, "automation", tt.name, "-n", ns, "-o", "json")
			var got struct {
				LastPullRequest *meta.PullRequestStatus `json:"lastPullRequest"`
			}
			if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.LastPullRequest == nil || *got.LastPullRequest != tt.pr {
				t.Errorf("%s -o json: code %d, %v, lastPullRequest %+v:\n%s", tt.name, code, err, got.LastPullRequest, out)
			}
		}

		// Without one, nothing is said about pull requests.
		_, out, _ := c.explain(t, "automation", "fleet", "-n", ns)
		if strings.Contains(out, "pull request") {
			t.Errorf("an automation that never proposed a request mentions one:\n%s", out)
		}
	})

	t.Run("errors", func(t *testing.T) {
		code, _, errs := c.explain(t, "policy", "missing", "-n", ns)
		if code != 1 || !strings.Contains(errs, `imagepolicies.image.toolkit.dev "missing" not found`) {
			t.Errorf("missing policy: code %d, stderr %q", code, errs)
		}
		code, _, errs = c.explain(t, "automation", "missing", "-n", ns)
		if code != 1 || !strings.Contains(errs, `imageupdateautomations.image.toolkit.dev "missing" not found`) {
			t.Errorf("missing automation: code %d, stderr %q", code, errs)
		}
		for _, args := range [][]string{
			{"policy", "podinfo", "--scan-checkout", t.TempDir()},
			{"automation", "fleet", "--scan-checkout", "/does/not/exist"},
			{"automation", "fleet", "-o", "xml"},
			{"repository", "podinfo"},
			{"policy"},
		} {
			if code, _, errs := c.explain(t, append(args, "-n", ns)...); code != 2 {
				t.Errorf("%v: code %d, stderr %q; want 2", args, code, errs)
			}
		}
	})

	// On this control plane, in a namespace of its own: one UpdateJob
	// carrying many automations' updates is each one's own job
	// (batch_explain_test.go).
	t.Run("members of a batch", func(t *testing.T) { testBatch(t, c) })
}

// policy eval --explain prints the breakdown explain policy shows, from the
// same engine, and still exits 1 when no tag is left.
func TestPolicyEvalExplain(t *testing.T) {
	tags := "1.0.0\nv1.4.2\n2.0.0\nlatest\n1.2\nmain-7-100\nmain-8-99\n"
	code, out, errs := runCLI(t, tags, "policy", "eval", "--semver", ">=1.0.0 <2.0.0", "--explain")
	want := `Considered:     7 tags
Not a version:  4 (a version needs all three numbers, e.g. 1.2.0)
Out of range:   1 outside ">=1.0.0 <2.0.0"
Kept:           2
Best first:     v1.4.2, 1.0.0
Selected:       v1.4.2
`
	if code != 0 || out != want {
		t.Errorf("code %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errs, out, want)
	}

	code, out, _ = runCLI(t, tags, "policy", "eval", "--numerical", "asc", "--explain",
		"--filter-pattern", `^main-\d+-(?P<ts>\d+)$`, "--filter-extract", "$ts")
	mustContain(t, "numerical", out, `Filtered out: 5 not matching "^main-\\d+-(?P<ts>\\d+)$"`, "Not a number: 0", "Best first: main-7-100, main-8-99")
	if code != 0 {
		t.Errorf("numerical: code %d", code)
	}

	code, out, errs = runCLI(t, tags, "policy", "eval", "--semver", ">=3.0.0", "--explain")
	if code != 1 || !strings.Contains(out, "Selected:       nothing: no tag is left") || !strings.Contains(errs, "no tag matches the policy") {
		t.Errorf("no match: code %d, stdout %q, stderr %q", code, out, errs)
	}
}
