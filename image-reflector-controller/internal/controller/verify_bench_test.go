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
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
)

// BenchmarkVerifyCost measures what spec.verify costs, through the
// reflector's reconcilers, a real registry (with the referrers API) and
// keyless signatures of sigstore-go's virtual Sigstore, with default
// flags: a 1,000-tag repository whose every 20th tag is signed (50 signed;
// the best tag is not), cold, against the same policy without verify; a
// rescan with nothing new; and 1,000 policies sharing one verified digest.
// Reported, not timed by b.N: run it with
//
//	go test -run '^$' -bench BenchmarkVerifyCost -benchtime 1x ./image-reflector-controller/internal/controller/
func BenchmarkVerifyCost(b *testing.B) {
	verifications := func() float64 {
		var n float64
		for _, r := range []string{"verified", "NoSignature", "Untrusted", "Malformed", "TooLarge", "TooManyReferrers", "error"} {
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

		// A rescan that lists the same tags, then a policy reconcile.
		v0, r0 = verifications(), requests()
		token := time.Now().Format(time.RFC3339Nano)
		requestReconcile(b, repo, token)
		benchWait(b, repo, conditions.SucceededReason, token)
		requestReconcile(b, p, token)
		benchWait(b, p, imagev1.SignatureVerificationFailedReason, token)
		rescan, rescanReq := verifications()-v0, requests()-r0

		b.Logf("cold: plain policy %v; verifying policy %v, %v verifications, %v registry requests by them (%d manifest and blob reads in all); rescan and reconcile with nothing new: %v verifications, %v requests",
			plainTime.Round(time.Millisecond), verifyTime.Round(time.Millisecond), cold, coldReq, coldReads, rescan, rescanReq)
		b.ReportMetric(cold, "verifications-cold")
		b.ReportMetric(coldReq, "verify-requests-cold")
		b.ReportMetric(float64(verifyTime.Milliseconds()), "ms-verify-cold")
		b.ReportMetric(float64(plainTime.Milliseconds()), "ms-plain-cold")
		b.ReportMetric(rescan, "verifications-rescan")
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

func benchCreate(b *testing.B, obj client.Object) {
	b.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		b.Fatal(err)
	}
}
