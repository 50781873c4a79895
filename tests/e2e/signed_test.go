package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// Signed images through the three controllers, signed keylessly with
// sigstore-go's virtual Sigstore (no public Fulcio or Rekor here) and
// pushed as cosign v3 pushes bundles: the signed 6.4.0 moves git with its
// verified digest while the newer unsigned 6.5.0 does not (the policy's
// Ready message and status say why); 6.6.0 signed by another identity
// does not either; and 6.7.0, verified and then re-pushed unsigned under
// the same tag while the automation was suspended, is refused by the job
// (VerifiedImageMoved) and never reaches git.
func TestChainSignedImages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const issuer, subject = "https://token.actions.example.com", "release@example.com"
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	d640 := reg.Push(t, chain.Image, "6.4.0")
	s.SignImage(t, reg, chain.Image, d640, subject, issuer)
	reg.Push(t, chain.Image, "6.5.0")
	env, root := startChain(ctx, t, nil, chain.Options{RegistryHost: reg.Host})
	host := env.RegistryHost + "/" + chain.Image
	c := env.Cluster.Client
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sigstore-root"},
		Data: map[string][]byte{"trusted_root.json": s.TrustedRoot(t)}}); err != nil {
		t.Fatal(err)
	}
	start, err := env.FleetGit("rev-parse", "main")
	if err != nil {
		t.Fatal(err)
	}
	start = strings.TrimSpace(start)
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	samples = extendSamplePolicy(t, samples, fmt.Sprintf(`  verify:
    provider: cosign
    matchOIDCIdentity:
    - issuer: ^%s$
      subject: ^%s$
    trustedRootSecretRef:
      name: sigstore-root
`, issuer, subject))
	if err := env.Apply(ctx, samples); err != nil {
		t.Fatal(err)
	}

	key := client.ObjectKey{Namespace: "default", Name: "podinfo"}
	p := &imagev1.ImagePolicy{}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		if err := c.Get(ctx, key, p); err == nil && p.Status.LatestRef != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy chose nothing: %+v", p.Status)
		}
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		if h := strings.TrimSpace(must(env.FleetGit("rev-parse", "main"))); h != start {
			break
		}
		if time.Now().After(deadline) {
			var jobs updatev1.UpdateJobList
			_ = c.List(ctx, &jobs, client.InNamespace("default"))
			for _, j := range jobs.Items {
				t.Logf("job %s: %s %+v", j.Name, j.Status.Phase, conditions.Get(&j, conditions.ReadyCondition))
			}
			a := &imagev1.ImageUpdateAutomation{}
			_ = c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet"}, a)
			t.Fatalf("no commit; automation %+v", conditions.Get(a, conditions.ReadyCondition))
		}
	}
	first := waitHead(t, env, "main", start)
	body := must(env.FleetGit("show", first+":"+chain.ManifestPath))
	if !strings.Contains(body, host+":6.4.0@"+d640) || strings.Contains(body, "6.5.0") {
		t.Fatalf("the commit does not write the verified 6.4.0@%s alone:\n%s", d640, body)
	}
	waitPolicy := func(what string, ok func() bool) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, func() (bool, error) {
			if err := c.Get(ctx, key, p); err != nil {
				return false, err
			}
			return ok(), nil
		})
	}
	waitPolicy("6.5.0 skipped", func() bool { return p.Status.UnverifiedRef != nil })
	ready := conditions.Get(p, conditions.ReadyCondition)
	if ready.Reason != imagev1.SignatureVerificationFailedReason || !strings.Contains(ready.Message, "6.5.0") ||
		!strings.Contains(ready.Message, "NoSignature") || p.Status.UnverifiedRef.Tag != "6.5.0" {
		t.Errorf("Ready %s %q, unverifiedRef %+v: want 6.5.0 named, NoSignature", ready.Reason, ready.Message, p.Status.UnverifiedRef)
	}

	// Signed, but by someone else.
	d660 := reg.Push(t, chain.Image, "6.6.0")
	s.SignImage(t, reg, chain.Image, d660, "mallory@example.com", issuer)
	rescan(ctx, t, c, "6.6.0")
	waitPolicy("6.6.0 untrusted", func() bool {
		return p.Status.UnverifiedRef != nil && p.Status.UnverifiedRef.Tag == "6.6.0" && p.Status.UnverifiedRef.Reason == "Untrusted"
	})
	if p.Status.LatestRef.Tag != "6.4.0" {
		t.Fatalf("latestRef moved to %s on a signature by the wrong identity", p.Status.LatestRef.Tag)
	}

	// Verified while the automation is suspended, then re-pushed unsigned
	// under the same tag: the job reads the tag again and refuses.
	auto := &imagev1.ImageUpdateAutomation{}
	akey := client.ObjectKey{Namespace: "default", Name: "fleet"}
	setSuspend := func(v bool) {
		t.Helper()
		if err := c.Get(ctx, akey, auto); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(auto.DeepCopy())
		auto.Spec.Suspend = v
		if err := c.Patch(ctx, auto, patch); err != nil {
			t.Fatal(err)
		}
	}
	setSuspend(true)
	d670 := reg.Push(t, chain.Image, "6.7.0")
	s.SignImage(t, reg, chain.Image, d670, subject, issuer)
	rescan(ctx, t, c, "6.7.0")
	waitPolicy("6.7.0 verified", func() bool { return p.Status.LatestRef.Tag == "6.7.0" })
	if p.Status.LatestRef.Digest != d670 || p.Status.Verification == nil || p.Status.Verification.Digest != d670 {
		t.Fatalf("latestRef %+v verification %+v, want 6.7.0@%s", p.Status.LatestRef, p.Status.Verification, d670)
	}
	moved := reg.Push(t, chain.Image, "6.7.0")
	setSuspend(false)
	var job updatev1.UpdateJob
	testenv.Eventually(t, 2*time.Minute, func() (bool, error) {
		var jobs updatev1.UpdateJobList
		if err := c.List(ctx, &jobs, client.InNamespace("default")); err != nil {
			return false, err
		}
		for _, j := range jobs.Items {
			for _, st := range j.Spec.Update.Setters {
				if st.Tag == "6.7.0" && j.Status.Phase.Finished() {
					job = j
					return true, nil
				}
			}
		}
		return false, nil
	})
	jc := conditions.Get(&job, conditions.ReadyCondition)
	if job.Status.Phase != updatev1.UpdateJobFailed || jc == nil || jc.Reason != updatev1.VerifiedImageMovedReason || !strings.Contains(jc.Message, moved) {
		t.Fatalf("job %s: phase %s, Ready %+v; want Failed, VerifiedImageMoved naming %s", job.Name, job.Status.Phase, jc, moved)
	}
	if head := strings.TrimSpace(must(env.FleetGit("rev-parse", "main"))); head != first {
		t.Errorf("main moved to %s: %s", head, must(env.FleetGit("show", head+":"+chain.ManifestPath)))
	}
}

// rescan asks the sample ImageRepository to scan now.
func rescan(ctx context.Context, t *testing.T, c client.Client, token string) {
	t.Helper()
	r := &imagev1.ImageRepository{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "podinfo"}, r); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(r.DeepCopy())
	if r.Annotations == nil {
		r.Annotations = map[string]string{}
	}
	r.Annotations[meta.ReconcileRequestAnnotation] = token
	if err := c.Patch(ctx, r, patch); err != nil {
		t.Fatal(err)
	}
}
