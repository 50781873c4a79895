package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/signature"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
)

// A signed image built from another repository is skipped with the
// attestation and the condition that failed; the newest whose provenance
// says it was built from the right repository and ref wins, and the
// status says who attested it and what it said, the source of latestRef
// being the provenance's.
func TestProvenanceGatesThePolicy(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	const good, evil = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	d100 := reg.PushLabelled(t, "team/attested", "1.0.0", map[string]string{"org.opencontainers.image.source": "https://github.com/acme/label", "org.opencontainers.image.revision": "3333333"}, nil)
	d110 := reg.Push(t, "team/attested", "1.1.0")
	for d, repo := range map[string]string{d100: "acme/api", d110: "evil/fork"} {
		s.SignImage(t, reg, "team/attested", d, oidcSubject, oidcIssuer)
		c := good
		if repo != "acme/api" {
			c = evil
		}
		s.AttestImage(t, reg, "team/attested", d, oidcSubject, oidcIssuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance(repo, "refs/heads/main", c))
	}
	ns := namespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigstore-root"},
		Data: map[string][]byte{"trusted_root.json": s.TrustedRoot(t)}})
	create(t, repoFor(ns, "attested", reg, "team/attested"))

	verifiedBefore := testutil.ToFloat64(verifyMetrics.Attestations.WithLabelValues(signature.SLSAProvenanceV1, "verified"))
	mismatchBefore := testutil.ToFloat64(verifyMetrics.Attestations.WithLabelValues(signature.SLSAProvenanceV1, string(signature.ProvenanceMismatch)))
	p := keylessPolicy(ns, "attested", "attested")
	p.Spec.Verify.Attestations = []imagev1.AttestationRule{{Name: "provenance", PredicateType: "slsaprovenance1",
		SLSA: &imagev1.SLSAProvenanceMatch{SourceRepository: "github.com/acme/*", SourceRef: "refs/heads/main"}}}
	create(t, p)
	waitReason(t, p, imagev1.SignatureVerificationFailedReason)
	if got := p.Status.LatestRef; got == nil || got.Tag != "1.0.0" || got.Digest != d100 {
		t.Fatalf("latestRef %+v, want 1.0.0@%s", got, d100)
	}
	u := p.Status.UnverifiedRef
	if u == nil || u.Tag != "1.1.0" || u.Reason != string(signature.ProvenanceMismatch) ||
		!strings.Contains(u.Message, "source repository github.com/evil/fork does not match github.com/acme/*") {
		t.Errorf("unverifiedRef %+v", u)
	}
	v := p.Status.Verification
	if v == nil || len(v.Attestations) != 1 {
		t.Fatalf("verification %+v, want one attestation", v)
	}
	if a := v.Attestations[0]; a.Name != "provenance" || a.SourceRepository != "github.com/acme/api" || a.Revision != good ||
		a.SourceRef != "refs/heads/main" || !strings.Contains(a.Signer, oidcSubject) {
		t.Errorf("attestation %+v", a)
	}
	if n := testutil.ToFloat64(verifyMetrics.Attestations.WithLabelValues(signature.SLSAProvenanceV1, "verified")) - verifiedBefore; n != 1 {
		t.Errorf("%v verified provenances counted, want 1", n)
	}
	if n := testutil.ToFloat64(verifyMetrics.Attestations.WithLabelValues(signature.SLSAProvenanceV1, string(signature.ProvenanceMismatch))) - mismatchBefore; n != 1 {
		t.Errorf("%v mismatched provenances counted, want 1", n)
	}
	waitPolicy(t, p, func(p *imagev1.ImagePolicy) bool { return p.Status.LatestSource != nil })
	if src := p.Status.LatestSource; !src.Verified || src.URL != "https://github.com/acme/api" || src.Revision != good || len(src.Dropped) != 2 {
		t.Errorf("latestSource %+v, want the provenance's, the labels dropped", src)
	}
}

// The API server refuses rules that cannot be met: attestations for
// notation, SLSA conditions on another predicate, a bad rule name.
func TestAttestationRulesAreValidated(t *testing.T) {
	ns := namespace(t)
	for name, mutate := range map[string]func(*imagev1.ImageVerification){
		"notation": func(v *imagev1.ImageVerification) {
			v.Provider, v.MatchOIDCIdentity, v.TrustedRootSecretRef = imagev1.SignatureProviderNotation, nil, nil
			v.SecretRef = &meta.LocalObjectReference{Name: "certs"}
			v.TrustPolicyRef = &meta.LocalObjectReference{Name: "policy"}
		},
		"slsa on vuln": func(v *imagev1.ImageVerification) {
			v.Attestations[0].PredicateType = "vuln"
		},
		"bad name": func(v *imagev1.ImageVerification) {
			v.Attestations[0].Name = "Not A Name"
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := keylessPolicy(ns, strings.ReplaceAll(name, " ", "-"), "repo")
			p.Spec.Verify.Attestations = []imagev1.AttestationRule{{Name: "provenance", PredicateType: "slsaprovenance1",
				SLSA: &imagev1.SLSAProvenanceMatch{SourceRef: "refs/heads/main"}}}
			mutate(p.Spec.Verify)
			err := env.Client.Create(context.Background(), p)
			var se *apierrors.StatusError
			if !errors.As(err, &se) || !apierrors.IsInvalid(err) {
				t.Fatalf("create: %v, want Invalid", err)
			}
		})
	}
	// A predicate type the API cannot judge but the verifier refuses is
	// InvalidVerification, with the field.
	p := keylessPolicy(ns, "typo", "repo")
	p.Spec.Verify.Attestations = []imagev1.AttestationRule{{Name: "provenance", PredicateType: "slsa-provenance"}}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigstore-root"},
		Data: map[string][]byte{"trusted_root.json": testsign.NewSigstore(t).TrustedRoot(t)}})
	reg := testregistry.New(t, testregistry.Options{})
	reg.Push(t, "team/app", "1.0.0")
	create(t, repoFor(ns, "repo", reg, "team/app"))
	create(t, p)
	cond := waitReason(t, p, imagev1.InvalidVerificationReason)
	if !strings.Contains(cond.Message, "attestations[0].predicateType") || !strings.Contains(cond.Message, "slsa-provenance") {
		t.Errorf("Ready %q", cond.Message)
	}
}
