package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
)

const (
	oidcIssuer  = "https://token.actions.example.com"
	oidcSubject = "release@example.com"
)

// keylessPolicy is a semver policy verifying keyless signatures of
// oidcSubject with the trusted root in the Secret "sigstore-root".
func keylessPolicy(ns, name, repo string) *imagev1.ImagePolicy {
	p := policyFor(ns, name, repo, semverChoice(">=1.0.0"))
	p.Spec.Verify = &imagev1.ImageVerification{Provider: imagev1.SignatureProviderCosign,
		MatchOIDCIdentity:    []imagev1.OIDCIdentityMatch{{Issuer: "^" + oidcIssuer + "$", Subject: "^" + oidcSubject + "$"}},
		TrustedRootSecretRef: &meta.LocalObjectReference{Name: "sigstore-root"}}
	return p
}

func verifications(result string) float64 {
	return testutil.ToFloat64(verifyMetrics.Verifications.WithLabelValues(result))
}

// The newest tag whose signature verifies wins, with the digest that
// verified; a better tag that is unsigned, or signed by another identity,
// is skipped and named (status.unverifiedRef, the Ready message) until it
// is signed by the trusted identity. A second policy with the same trust
// verifies nothing again: the verdicts are the store's.
func TestNewestVerifiedTagWins(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	d100 := reg.Push(t, "team/signed", "1.0.0")
	d110 := reg.Push(t, "team/signed", "1.1.0")
	d120 := reg.Push(t, "team/signed", "1.2.0")
	s.SignImage(t, reg, "team/signed", d100, oidcSubject, oidcIssuer)
	s.SignImage(t, reg, "team/signed", d110, oidcSubject, oidcIssuer)
	ns := namespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigstore-root"},
		Data: map[string][]byte{"trusted_root.json": s.TrustedRoot(t)}})
	create(t, repoFor(ns, "signed", reg, "team/signed"))

	p := keylessPolicy(ns, "signed", "signed")
	create(t, p)
	cond := waitReason(t, p, imagev1.SignatureVerificationFailedReason)
	if cond.Status != metav1.ConditionTrue {
		t.Errorf("Ready %s: a skipped candidate is not a failed policy", cond.Status)
	}
	if got := p.Status.LatestRef; got == nil || got.Tag != "1.1.0" || got.Digest != d110 {
		t.Fatalf("latestRef %+v, want 1.1.0@%s", got, d110)
	}
	if v := p.Status.Verification; v == nil || v.Digest != d110 || !strings.Contains(v.Signer, oidcSubject) || v.Format != "bundle" || v.Skipped != 1 {
		t.Errorf("verification %+v", v)
	}
	if u := p.Status.UnverifiedRef; u == nil || u.Tag != "1.2.0" || u.Digest != d120 || u.Reason != "NoSignature" {
		t.Errorf("unverifiedRef %+v, want 1.2.0 NoSignature", u)
	}
	if !strings.Contains(cond.Message, "1.2.0") || !strings.Contains(cond.Message, "NoSignature") {
		t.Errorf("Ready message %q does not say why 1.2.0 was not chosen", cond.Message)
	}

	// The same trust in another policy: every verdict is cached.
	before := verifications("verified") + verifications("NoSignature")
	again := keylessPolicy(ns, "again", "signed")
	create(t, again)
	waitReason(t, again, imagev1.SignatureVerificationFailedReason)
	if n := verifications("verified") + verifications("NoSignature") - before; n != 0 {
		t.Errorf("%v verifications for a second policy with the same trust, want 0", n)
	}

	// Signed by someone else: still skipped, now Untrusted.
	s.SignImage(t, reg, "team/signed", d120, "mallory@example.com", oidcIssuer)
	waitPolicy(t, p, func(p *imagev1.ImagePolicy) bool {
		return p.Status.UnverifiedRef != nil && p.Status.UnverifiedRef.Reason == "Untrusted"
	})
	if p.Status.LatestRef.Tag != "1.1.0" {
		t.Fatalf("latestRef moved to %s on a signature by the wrong identity", p.Status.LatestRef.Tag)
	}

	// Signed by the trusted identity: it wins.
	s.SignImage(t, reg, "team/signed", d120, oidcSubject, oidcIssuer)
	waitReason(t, p, conditions.SucceededReason)
	if got := p.Status.LatestRef; got.Tag != "1.2.0" || got.Digest != d120 || p.Status.UnverifiedRef != nil {
		t.Fatalf("latestRef %+v unverifiedRef %+v, want 1.2.0@%s and none", got, p.Status.UnverifiedRef, d120)
	}
}

// No candidate verifies: the policy chooses nothing, says why, and
// latestRef stays unset.
func TestNoVerifiedCandidate(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	s := testsign.NewSigstore(t)
	reg.Push(t, "team/unsigned", "1.0.0")
	reg.Push(t, "team/unsigned", "1.1.0")
	ns := namespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigstore-root"},
		Data: map[string][]byte{"trusted_root.json": s.TrustedRoot(t)}})
	create(t, repoFor(ns, "unsigned", reg, "team/unsigned"))
	p := keylessPolicy(ns, "unsigned", "unsigned")
	create(t, p)
	cond := waitReason(t, p, imagev1.NoVerifiedCandidateReason)
	if p.Status.LatestRef != nil {
		t.Errorf("latestRef %+v with nothing verified", p.Status.LatestRef)
	}
	if !strings.Contains(cond.Message, "none of 2") || p.Status.UnverifiedRef == nil || p.Status.UnverifiedRef.Tag != "1.1.0" {
		t.Errorf("Ready %q, unverifiedRef %+v", cond.Message, p.Status.UnverifiedRef)
	}

	// A trusted root Secret that is not one: the user's to fix.
	bad := keylessPolicy(ns, "bad", "unsigned")
	bad.Spec.Verify.TrustedRootSecretRef.Name = "nope"
	create(t, bad)
	waitReason(t, bad, imagev1.InvalidVerificationReason)
}

// waitPolicy waits until the policy's status satisfies ok.
func waitPolicy(t *testing.T, p *imagev1.ImagePolicy, ok func(*imagev1.ImagePolicy) bool) {
	t.Helper()
	testenv.Eventually(t, waitFor, func() (bool, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return false, err
		}
		return ok(p), nil
	})
}

// With spec.platform, the signature of the tag's index is verified and
// latestRef carries that platform's manifest, read from the index by the
// digest that verified: a signed multi-platform image is followed on one
// platform, and an unsigned index is still skipped.
func TestVerifiedIndexGivesThePlatformsManifest(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	built := time.Now().Add(-time.Hour)
	index, per := reg.PushIndex(t, "team/multi", "1.0.0", built, "linux/amd64", "linux/arm64/v8")
	reg.PushIndex(t, "team/multi", "1.1.0", built, "linux/amd64", "linux/arm64/v8")
	s.SignImage(t, reg, "team/multi", index, oidcSubject, oidcIssuer)
	ns := namespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigstore-root"},
		Data: map[string][]byte{"trusted_root.json": s.TrustedRoot(t)}})
	create(t, repoFor(ns, "multi", reg, "team/multi"))
	p := keylessPolicy(ns, "multi", "multi")
	p.Spec.Platform = "linux/arm64"
	create(t, p)
	waitReason(t, p, imagev1.SignatureVerificationFailedReason)
	if got := p.Status.LatestRef; got == nil || got.Tag != "1.0.0" || got.Digest != per["linux/arm64/v8"] {
		t.Fatalf("latestRef %+v, want 1.0.0@%s (arm64's manifest of the signed index)", got, per["linux/arm64/v8"])
	}
	if v := p.Status.Verification; v == nil || v.Digest != index || v.PlatformDigest != per["linux/arm64/v8"] {
		t.Errorf("verification %+v, want the index %s verified and the platform's manifest recorded", v, index)
	}
	if u := p.Status.UnverifiedRef; u == nil || u.Tag != "1.1.0" {
		t.Errorf("unverifiedRef %+v, want the unsigned 1.1.0", u)
	}
}

// A tag signed after the policy found it unsigned is taken as soon as the
// user asks (a reconcile request), not after --verify-retry: the verdict
// cache answers "not signed" only to reconciles nobody asked for. The
// policy runs on a manager of its own with the default retry of 10
// minutes, so within the test only the request can check it again.
func TestReconcileRequestChecksAnUnsignedTagAgain(t *testing.T) {
	startClocked(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	d100 := reg.Push(t, "team/late", "1.0.0")
	ns := namespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigstore-root"},
		Data: map[string][]byte{"trusted_root.json": s.TrustedRoot(t)}})
	repo := repoFor(ns, "late", reg, "team/late")
	p := keylessPolicy(ns, "late", "late")
	second(repo, p)
	create(t, repo, p)
	waitReason(t, p, imagev1.NoVerifiedCandidateReason)

	s.SignImage(t, reg, "team/late", d100, oidcSubject, oidcIssuer)
	cond := reconcileNow(t, p, conditions.SucceededReason)
	if p.Status.LatestRef == nil || p.Status.LatestRef.Digest != d100 {
		t.Fatalf("after the request: latestRef %+v, Ready %s %q; want 1.0.0@%s", p.Status.LatestRef, cond.Reason, cond.Message, d100)
	}
}
