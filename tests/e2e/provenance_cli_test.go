package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// Provenance gates through the three controllers, with images signed and
// attested by the real cosign CLI (keyed, cosign v3's bundle referrers on
// a registry without the referrers API; make test-integrations runs
// this, make test skips it). The policy wants a provenance of a build of
// github.com/acme/* and a scan without critical findings: 6.5.0, signed
// by the trusted key but built from another repository, never reaches
// git and the policy says ProvenanceMismatch; the lower 6.4.0, attested
// right, does; and 6.6.0, built right but with a critical finding, is
// held back as well.
func TestChainProvenanceGates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const good, evil = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	cosign := testsign.NewCosign(t)
	reg := testregistry.New(t, testregistry.Options{})
	release := func(tag, repo, commit string, critical int) string {
		t.Helper()
		d := reg.Push(t, chain.Image, tag)
		ref := reg.Repo(chain.Image) + "@" + d
		cosign.Sign(t, ref, testsign.Bundle)
		cosign.Attest(t, ref, "slsaprovenance1", testsign.SLSAProvenance(repo, "refs/heads/main", commit), testsign.Bundle)
		cosign.Attest(t, ref, "vuln", testsign.VulnReport(critical), testsign.Bundle)
		return d
	}
	d640 := release("6.4.0", "acme/api", good, 0)
	release("6.5.0", "evil/fork", evil, 0)

	env, root := startChain(ctx, t, nil, chain.Options{RegistryHost: reg.Host})
	c := env.Cluster.Client
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "keys"},
		Data: map[string][]byte{"release.pub": cosign.PublicKey}}); err != nil {
		t.Fatal(err)
	}
	start := strings.TrimSpace(must(env.FleetGit("rev-parse", "main")))
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Apply(ctx, extendSamplePolicy(t, samples, `  verify:
    provider: cosign
    secretRef:
      name: keys
    attestations:
    - name: provenance
      predicateType: slsaprovenance1
      slsa:
        sourceRepository: github.com/acme/*
        sourceRef: refs/heads/main
    - name: scan
      predicateType: vuln
      conditions:
      - predicate.scanner.result.summary.critical == 0
`)); err != nil {
		t.Fatal(err)
	}

	head := waitHead(t, env, "main", start)
	body := must(env.FleetGit("show", head+":"+chain.ManifestPath))
	if !strings.Contains(body, env.RegistryHost+"/"+chain.Image+":6.4.0@"+d640) || strings.Contains(body, "6.5.0") {
		t.Fatalf("the commit does not write the attested 6.4.0@%s alone:\n%s", d640, body)
	}
	p := &imagev1.ImagePolicy{}
	key := client.ObjectKey{Namespace: "default", Name: "podinfo"}
	waitPolicy := func(ok func() bool) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, func() (bool, error) {
			if err := c.Get(ctx, key, p); err != nil {
				return false, err
			}
			return ok(), nil
		})
	}
	waitPolicy(func() bool { return p.Status.UnverifiedRef != nil })
	if u := p.Status.UnverifiedRef; u.Tag != "6.5.0" || u.Reason != "ProvenanceMismatch" ||
		!strings.Contains(u.Message, "attestation provenance") ||
		!strings.Contains(u.Message, "source repository github.com/evil/fork does not match github.com/acme/*") {
		t.Errorf("unverifiedRef %+v, want 6.5.0 ProvenanceMismatch naming the repository and the pattern", u)
	}
	v := p.Status.Verification
	if v == nil || v.Digest != d640 || len(v.Attestations) != 2 {
		t.Fatalf("verification %+v, want %s with both attestations", v, d640)
	}
	if a := v.Attestations[0]; a.Name != "provenance" || a.SourceRepository != "github.com/acme/api" || a.Revision != good ||
		a.Format != "bundle" || a.Signer != "key release.pub" {
		t.Errorf("provenance attestation %+v", a)
	}
	if a := v.Attestations[1]; a.Name != "scan" || a.PredicateType != "https://cosign.sigstore.dev/attestation/vuln/v1" {
		t.Errorf("scan attestation %+v", a)
	}

	// Built from the right repository, but with a critical finding.
	release("6.6.0", "acme/api", good, 1)
	rescan(ctx, t, c, "6.6.0")
	waitPolicy(func() bool { return p.Status.UnverifiedRef != nil && p.Status.UnverifiedRef.Tag == "6.6.0" })
	if u := p.Status.UnverifiedRef; u.Reason != "ProvenanceMismatch" || !strings.Contains(u.Message, "attestation scan") ||
		!strings.Contains(u.Message, "predicate.scanner.result.summary.critical == 0 is false") {
		t.Errorf("unverifiedRef %+v, want 6.6.0 held by the scan's condition", u)
	}
	if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "6.4.0" {
		t.Fatalf("latestRef %+v, want 6.4.0 still", p.Status.LatestRef)
	}
	// The automation runs again after the policy saw 6.6.0, and writes
	// nothing.
	iua := &imagev1.ImageUpdateAutomation{}
	iua.Name, iua.Namespace = "fleet", "default"
	token, err := env.RequestReconcileToken(ctx, iua)
	if err != nil {
		t.Fatal(err)
	}
	waitAutomation(t, env, iua, func() bool { return iua.Status.LastHandledReconcileAt == token })
	if h := env.Head("main"); h != head {
		t.Errorf("main moved to %s:\n%s", h, must(env.FleetGit("show", h+":"+chain.ManifestPath)))
	}
}
