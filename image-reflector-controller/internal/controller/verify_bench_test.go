package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/signature"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
)

// BenchmarkVerifyCost measures what spec.verify costs, through the
// reflector's reconcilers, a real registry (with the referrers API) and
// keyless signatures of sigstore-go's virtual Sigstore, with default
// flags: a 1,000-tag repository whose every 20th tag is signed and
// attested with an SLSA provenance (50 of them; the best tag is not),
// cold, against the same policy without verify, and with the provenance
// required too (spec.verify.attestations); a rescan with nothing new; and
// 1,000 policies sharing one verified digest.
// Reported, not timed by b.N: run it with
//
//	go test -run '^$' -bench BenchmarkVerifyCost -benchtime 1x ./image-reflector-controller/internal/controller/
func BenchmarkVerifyCost(b *testing.B) {
	verifications := func() float64 {
		var n float64
		for _, r := range []string{"verified", "NoSignature", "Untrusted", "Malformed", "TooLarge", "TooManyReferrers", "NoAttestation", "ProvenanceMismatch", "error"} {
			n += testutil.ToFloat64(verifyMetrics.Verifications.WithLabelValues(r))
		}
		return n
	}
	requests := func() float64 { return testutil.ToFloat64(verifyMetrics.Requests) }
	s := testsign.NewSigstore(b)

	b.Run("1000-tags-50-signed", func(b *testing.B) {
		reg := testregistry.New(b, testregistry.Options{Referrers: true})
		for i := range 1000 {
			d := reg.Push(b, "app", fmt.Sprintf("1.0.%d", i))
			if i%20 == 0 {
				s.SignImage(b, reg, "app", d, oidcSubject, oidcIssuer)
				s.AttestImage(b, reg, "app", d, oidcSubject, oidcIssuer, signature.SLSAProvenanceV1,
					testsign.SLSAProvenance("acme/api", "refs/heads/main", fmt.Sprintf("%040x", i)))
			}
		}
		ns := env.Namespace(b)
		benchCreate(b, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigstore-root"},
			Data: map[string][]byte{"trusted_root.json": s.TrustedRoot(b)}})
		repo := repoFor(ns, "app", reg, "app")
		benchCreate(b, repo)
		benchWait(b, repo, conditions.SucceededReason, "")

		plain := policyFor(ns, "plain", "app", semverChoice("*"))
		start := time.Now()
		benchCreate(b, plain)
		benchWait(b, plain, conditions.SucceededReason, "")
		plainTime := time.Since(start)

		v0, r0, m0 := verifications(), requests(), reg.ManifestRequests()+reg.BlobRequests()
		p := keylessPolicy(ns, "signed", "app")
		p.Spec.Policy = semverChoice("*")
		start = time.Now()
		benchCreate(b, p)
		benchWait(b, p, imagev1.SignatureVerificationFailedReason, "")
		verifyTime := time.Since(start)
		cold, coldReq, coldReads := verifications()-v0, requests()-r0, reg.ManifestRequests()+reg.BlobRequests()-m0
		if p.Status.LatestRef.Tag != "1.0.980" {
			b.Fatalf("chose %s, want 1.0.980", p.Status.LatestRef.Tag)
		}

		reqVer, reqReq := requestedCost(b, p, verifications, requests)

		// The same walk with the provenance required: another rule set,
		// so nothing of the signatures' verdicts is reused.
		v0, r0, m0 = verifications(), requests(), reg.ManifestRequests()+reg.BlobRequests()
		att := keylessPolicy(ns, "attested", "app")
		att.Spec.Policy = semverChoice("*")
		att.Spec.Verify.Attestations = []imagev1.AttestationRule{{Name: "provenance", PredicateType: "slsaprovenance1",
			SLSA: &imagev1.SLSAProvenanceMatch{SourceRepository: "github.com/acme/*", SourceRef: "refs/heads/main"}}}
		start = time.Now()
		benchCreate(b, att)
		benchWait(b, att, imagev1.SignatureVerificationFailedReason, "")
		attTime := time.Since(start)
		attCold, attReq, attReads := verifications()-v0, requests()-r0, reg.ManifestRequests()+reg.BlobRequests()-m0
		if att.Status.LatestRef.Tag != "1.0.980" || att.Status.Verification == nil || len(att.Status.Verification.Attestations) != 1 {
			b.Fatalf("chose %s (%+v), want 1.0.980 with its provenance", att.Status.LatestRef.Tag, att.Status.Verification)
		}
		attReqVer, attReqReq := requestedCost(b, att, verifications, requests)

		b.Logf("cold: plain policy %v; verifying policy %v, %v verifications, %v registry requests by them (%d manifest and blob reads in all); a reconcile request on the policy (which checks the better unverified candidates again): %v verifications, %v requests",
			plainTime.Round(time.Millisecond), verifyTime.Round(time.Millisecond), cold, coldReq, coldReads, reqVer, reqReq)
		b.Logf("cold with the provenance required: %v, %v verifications, %v registry requests by them (%d manifest and blob reads in all); a reconcile request: %v verifications, %v requests",
			attTime.Round(time.Millisecond), attCold, attReq, attReads, attReqVer, attReqReq)
		b.ReportMetric(attCold, "verifications-cold-provenance")
		b.ReportMetric(attReq, "verify-requests-cold-provenance")
		b.ReportMetric(float64(attTime.Milliseconds()), "ms-verify-cold-provenance")
		b.ReportMetric(reqVer, "verifications-requested")
		b.ReportMetric(attReqVer, "verifications-requested-provenance")
		b.ReportMetric(cold, "verifications-cold")
		b.ReportMetric(coldReq, "verify-requests-cold")
		b.ReportMetric(float64(verifyTime.Milliseconds()), "ms-verify-cold")
		b.ReportMetric(float64(plainTime.Milliseconds()), "ms-plain-cold")
		for range b.N {
		}
	})

	// A rescan with nothing new, its own registry counting every request:
	// the best of 1,000 tags is signed and attested, so no verdict waits
	// for --verify-retry (2 s in this suite) and whatever the registry
	// serves after the scan's tags/list is the verification's.
	b.Run("1000-tags-rescan", func(b *testing.B) {
		reg := testregistry.New(b, testregistry.Options{Referrers: true})
		var best string
		for i := range 1000 {
			best = reg.Push(b, "app", fmt.Sprintf("1.0.%d", i))
		}
		s.SignImage(b, reg, "app", best, oidcSubject, oidcIssuer)
		s.AttestImage(b, reg, "app", best, oidcSubject, oidcIssuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance("acme/api", "refs/heads/main", fmt.Sprintf("%040x", 1)))
		ns := env.Namespace(b)
		benchCreate(b, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigstore-root"},
			Data: map[string][]byte{"trusted_root.json": s.TrustedRoot(b)}})
		repo := repoFor(ns, "app", reg, "app")
		benchCreate(b, repo)
		benchWait(b, repo, conditions.SucceededReason, "")
		signed := keylessPolicy(ns, "signed", "app")
		att := keylessPolicy(ns, "attested", "app")
		att.Spec.Verify.Attestations = []imagev1.AttestationRule{{Name: "provenance", PredicateType: "slsaprovenance1",
			SLSA: &imagev1.SLSAProvenanceMatch{SourceRepository: "github.com/acme/*"}}}
		for _, p := range []*imagev1.ImagePolicy{signed, att} {
			p.Spec.Policy = semverChoice("*")
			benchCreate(b, p)
			benchWait(b, p, conditions.SucceededReason, "")
		}
		v0, r0, t0 := verifications(), reg.Requests(), reg.TagListRequests()
		token := time.Now().Format(time.RFC3339Nano)
		requestReconcile(b, repo, token)
		benchWait(b, repo, conditions.SucceededReason, token)
		// Time for the policies to react, had the scan changed anything.
		time.Sleep(3 * time.Second)
		n, other := verifications()-v0, float64(reg.Requests()-r0-(reg.TagListRequests()-t0))
		b.Logf("a rescan of 1,000 tags with nothing new, two verifying policies (one with a provenance rule): %v verifications, %v registry requests besides the scan's tags/list (%d of them)",
			n, other, reg.TagListRequests()-t0)
		b.ReportMetric(n, "verifications-rescan")
		b.ReportMetric(other, "requests-rescan")
		for range b.N {
		}
	})

	b.Run("1000-policies-one-digest", func(b *testing.B) {
		reg := testregistry.New(b, testregistry.Options{Referrers: true})
		d := reg.Push(b, "shared", "1.0.0")
		s.SignImage(b, reg, "shared", d, oidcSubject, oidcIssuer)
		ns := env.Namespace(b)
		benchCreate(b, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigstore-root"},
			Data: map[string][]byte{"trusted_root.json": s.TrustedRoot(b)}})
		repo := repoFor(ns, "shared", reg, "shared")
		benchCreate(b, repo)
		benchWait(b, repo, conditions.SucceededReason, "")
		v0 := verifications()
		start := time.Now()
		policies := make([]*imagev1.ImagePolicy, 1000)
		for i := range policies {
			policies[i] = keylessPolicy(ns, fmt.Sprintf("p%04d", i), "shared")
			if err := env.Client.Create(context.Background(), policies[i]); err != nil {
				b.Fatal(err)
			}
		}
		for _, p := range policies {
			benchWait(b, p, conditions.SucceededReason, "")
		}
		n := verifications() - v0
		b.Logf("1,000 policies sharing one verified digest: %v verification(s), all Ready in %v", n, time.Since(start).Round(time.Millisecond))
		b.ReportMetric(n, "verifications")
		for range b.N {
		}
	})
}

// requestedCost is what a reconcile request on p costs: it checks the
// better candidates that did not verify again (a user who asks has
// usually just signed one).
func requestedCost(b *testing.B, p *imagev1.ImagePolicy, verifications, requests func() float64) (float64, float64) {
	b.Helper()
	v0, r0 := verifications(), requests()
	token := time.Now().Format(time.RFC3339Nano)
	requestReconcile(b, p, token)
	benchWait(b, p, imagev1.SignatureVerificationFailedReason, token)
	return verifications() - v0, requests() - r0
}

func benchCreate(b *testing.B, obj client.Object) {
	b.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		b.Fatal(err)
	}
}
