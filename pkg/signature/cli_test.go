package signature_test

import (
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/signature"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
)

// These tests sign with the real cosign and notation CLIs (make
// sign-tools); they skip without them, and make test-integrations runs
// them.

func keyed(keys map[string][]byte) signature.Config {
	return signature.Config{Provider: signature.Cosign, Keys: keys}
}

func TestCosignKeyedSignaturesVerifyInBothFormats(t *testing.T) {
	c := testsign.NewCosign(t)
	for _, r := range registries {
		for _, format := range []testsign.Format{testsign.Bundle, testsign.Legacy} {
			t.Run(r.name+"/"+string(format), func(t *testing.T) {
				reg := testregistry.New(t, testregistry.Options{Referrers: r.referrers})
				d := reg.Push(t, "app", "1.0.0")
				c.Sign(t, reg.Repo("app")+"@"+d, format)
				v := check(t, keyed(map[string][]byte{"cosign.pub": c.PublicKey}), signature.Limits{}, reg, "app", d)
				wantVerified(t, v, "key cosign.pub")
				if v.Format != string(format) {
					t.Errorf("format %q, want %q", v.Format, format)
				}
			})
		}
	}
}

// Every key of the set is tried; a signature by a key outside it is
// Untrusted, in either format.
func TestCosignKeySet(t *testing.T) {
	signer, other := testsign.NewCosign(t), testsign.NewCosign(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	for _, format := range []testsign.Format{testsign.Bundle, testsign.Legacy} {
		d := reg.Push(t, "app", "1.0.0-"+string(format))
		signer.Sign(t, reg.Repo("app")+"@"+d, format)
		v := check(t, keyed(map[string][]byte{"a.pub": other.PublicKey, "b.pub": signer.PublicKey}), signature.Limits{}, reg, "app", d)
		wantVerified(t, v, "key b.pub")
		v = check(t, keyed(map[string][]byte{"a.pub": other.PublicKey}), signature.Limits{}, reg, "app", d)
		wantReason(t, v, signature.Untrusted)
		if !strings.Contains(v.Message, "a.pub") {
			t.Errorf("message %q does not name the key tried", v.Message)
		}
	}
}

func TestNotationSignatureVerifiesWithItsCA(t *testing.T) {
	n := testsign.NewNotation(t, "release")
	for _, r := range registries {
		t.Run(r.name, func(t *testing.T) {
			reg := testregistry.New(t, testregistry.Options{Referrers: r.referrers})
			d := reg.Push(t, "app", "1.0.0")
			cfg := signature.Config{Provider: signature.Notation, TrustPolicy: testsign.TrustPolicy("release", "*"),
				Certificates: map[string][]byte{"ca.crt": n.Certificate}}
			wantReason(t, check(t, cfg, signature.Limits{}, reg, "app", d), signature.NoSignature)
			n.Sign(t, reg.Repo("app")+"@"+d)
			v := check(t, cfg, signature.Limits{}, reg, "app", d)
			wantVerified(t, v, "release")
			if v.Format != "notation" {
				t.Errorf("format %q", v.Format)
			}
		})
	}
}

func TestNotationOtherCAIsUntrusted(t *testing.T) {
	n, other := testsign.NewNotation(t, "release"), testsign.NewNotation(t, "mallory")
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	d := reg.Push(t, "app", "1.0.0")
	other.Sign(t, reg.Repo("app")+"@"+d)
	cfg := signature.Config{Provider: signature.Notation, TrustPolicy: testsign.TrustPolicy("release", "*"),
		Certificates: map[string][]byte{"ca.crt": n.Certificate}}
	wantReason(t, check(t, cfg, signature.Limits{}, reg, "app", d), signature.Untrusted)
}

// The real cosign attest, keyed, in both of its formats (a Sigstore bundle
// referrer, cosign v3's default, and the legacy sha256-<hex>.att tag of
// cosign v2) on both kinds of registry: what the in-process tests of
// attest_test.go assume of cosign's statements (the predicate shapes
// --type slsaprovenance1 and --type vuln write, the .att layers, the
// bundle's predicate type annotation) is checked against cosign itself.

// attestCase is one registry kind, a fresh registry of it, and one
// cosign format.
type attestCase struct {
	reg    *testregistry.Registry
	format testsign.Format
}

// eachAttestFormat runs fn for every registry kind and cosign format.
func eachAttestFormat(t *testing.T, fn func(t *testing.T, tc attestCase)) {
	for _, r := range registries {
		for _, format := range []testsign.Format{testsign.Bundle, testsign.Legacy} {
			t.Run(r.name+"/"+string(format), func(t *testing.T) {
				fn(t, attestCase{reg: testregistry.New(t, testregistry.Options{Referrers: r.referrers}), format: format})
			})
		}
	}
}

// signedBy pushes tag and signs it with c in the case's format.
func (tc attestCase) signedBy(t *testing.T, c *testsign.Cosign, tag string) (ref, digest string) {
	t.Helper()
	digest = tc.reg.Push(t, "app", tag)
	ref = tc.reg.Repo("app") + "@" + digest
	c.Sign(t, ref, tc.format)
	return ref, digest
}

func TestCosignAttestedProvenanceVerifiesInBothFormats(t *testing.T) {
	c := testsign.NewCosign(t)
	cfg := withRules(keyed(map[string][]byte{"cosign.pub": c.PublicKey}), provenanceRule())
	eachAttestFormat(t, func(t *testing.T, tc attestCase) {
		ref, d := tc.signedBy(t, c, "1.0.0")
		// Signed but not yet attested: the rule is not met.
		wantReason(t, check(t, cfg, signature.Limits{}, tc.reg, "app", d), signature.NoAttestation)
		c.Attest(t, ref, "slsaprovenance1", testsign.SLSAProvenance("acme/api", "refs/heads/main", commit), tc.format)
		v := check(t, cfg, signature.Limits{}, tc.reg, "app", d)
		wantVerified(t, v, "key cosign.pub")
		if len(v.Attestations) != 1 {
			t.Fatalf("attestations %+v, want one", v.Attestations)
		}
		a := v.Attestations[0]
		if a.Name != "provenance" || a.PredicateType != signature.SLSAProvenanceV1 || a.Format != string(tc.format) ||
			a.Signer != "key cosign.pub" || a.Builder != "https://github.com/actions/runner/github-hosted" ||
			a.SourceRepository != "github.com/acme/api" || a.SourceRef != "refs/heads/main" || a.Revision != commit {
			t.Errorf("attestation %+v", a)
		}
	})
}

func TestCosignAttestedProvenanceFromAnotherRepositoryIsAMismatch(t *testing.T) {
	c := testsign.NewCosign(t)
	cfg := withRules(keyed(map[string][]byte{"cosign.pub": c.PublicKey}), provenanceRule())
	eachAttestFormat(t, func(t *testing.T, tc attestCase) {
		ref, d := tc.signedBy(t, c, "1.0.0")
		c.Attest(t, ref, "slsaprovenance1", testsign.SLSAProvenance("evil/fork", "refs/heads/main", commit), tc.format)
		v := check(t, cfg, signature.Limits{}, tc.reg, "app", d)
		wantReason(t, v, signature.ProvenanceMismatch)
		for _, want := range []string{"attestation provenance", "source repository github.com/evil/fork does not match github.com/acme/*"} {
			if !strings.Contains(v.Message, want) {
				t.Errorf("message %q, want it to say %q", v.Message, want)
			}
		}
	})
}

func TestCosignAttestedVulnerabilityScanGatesOnCriticalFindings(t *testing.T) {
	c := testsign.NewCosign(t)
	rule := signature.Attestation{Name: "scan", PredicateType: "vuln", Conditions: []string{"predicate.scanner.result.summary.critical == 0"}}
	cfg := withRules(keyed(map[string][]byte{"cosign.pub": c.PublicKey}), rule)
	eachAttestFormat(t, func(t *testing.T, tc attestCase) {
		cleanRef, clean := tc.signedBy(t, c, "1.0.0")
		badRef, bad := tc.signedBy(t, c, "1.0.1")
		c.Attest(t, cleanRef, "vuln", testsign.VulnReport(0), tc.format)
		c.Attest(t, badRef, "vuln", testsign.VulnReport(2), tc.format)
		v := check(t, cfg, signature.Limits{}, tc.reg, "app", clean)
		wantVerified(t, v, "key cosign.pub")
		if a := v.Attestations; len(a) != 1 || a[0].PredicateType != "https://cosign.sigstore.dev/attestation/vuln/v1" || a[0].Format != string(tc.format) {
			t.Errorf("attestations %+v", a)
		}
		v = check(t, cfg, signature.Limits{}, tc.reg, "app", bad)
		wantReason(t, v, signature.ProvenanceMismatch)
		if !strings.Contains(v.Message, "attestation scan") || !strings.Contains(v.Message, "predicate.scanner.result.summary.critical == 0 is false") {
			t.Errorf("message %q", v.Message)
		}
	})
}

// The image's signature is the trusted key's, its attestation another
// key pair's: the attestation does not count.
func TestCosignAttestationByAnotherKeyIsUntrusted(t *testing.T) {
	c, mallory := testsign.NewCosign(t), testsign.NewCosign(t)
	cfg := withRules(keyed(map[string][]byte{"cosign.pub": c.PublicKey}), provenanceRule())
	eachAttestFormat(t, func(t *testing.T, tc attestCase) {
		ref, d := tc.signedBy(t, c, "1.0.0")
		mallory.Attest(t, ref, "slsaprovenance1", testsign.SLSAProvenance("acme/api", "refs/heads/main", commit), tc.format)
		v := check(t, cfg, signature.Limits{}, tc.reg, "app", d)
		wantReason(t, v, signature.Untrusted)
		if !strings.Contains(v.Message, "attestation provenance") || !strings.Contains(v.Message, "cosign.pub") {
			t.Errorf("message %q, want it to name the rule and the key tried", v.Message)
		}
	})
}

// One image carries every rule's attestation, and attestations that must
// not count beside them: another key pair's provenance of the right
// repository, and the trusted key's of another. In the legacy format
// they are layers of one .att manifest, verified one by one; in the
// bundle format, referrers of their own (on the tag schema, cosign's
// index names no predicate type, so every bundle is read).
func TestCosignAttestationsOfSeveralRulesAndSigners(t *testing.T) {
	c, mallory := testsign.NewCosign(t), testsign.NewCosign(t)
	scan := signature.Attestation{Name: "scan", PredicateType: "vuln", Conditions: []string{"predicate.scanner.result.summary.critical == 0"}}
	cfg := withRules(keyed(map[string][]byte{"cosign.pub": c.PublicKey}), provenanceRule(), scan)
	eachAttestFormat(t, func(t *testing.T, tc attestCase) {
		ref, d := tc.signedBy(t, c, "1.0.0")
		mallory.Attest(t, ref, "slsaprovenance1", testsign.SLSAProvenance("acme/api", "refs/heads/main", commit), tc.format)
		c.Attest(t, ref, "vuln", testsign.VulnReport(0), tc.format)
		// Only mallory's provenance names the right repository.
		v := check(t, cfg, signature.Limits{}, tc.reg, "app", d)
		wantReason(t, v, signature.Untrusted)
		if !strings.Contains(v.Message, "attestation provenance") {
			t.Errorf("message %q, want it to name the provenance rule", v.Message)
		}
		// The trusted key's provenance of another repository: what the
		// user must hear of is the mismatch, not mallory's signature.
		c.Attest(t, ref, "slsaprovenance1", testsign.SLSAProvenance("evil/fork", "refs/heads/main", "2222222222222222222222222222222222222222"), tc.format)
		v = check(t, cfg, signature.Limits{}, tc.reg, "app", d)
		wantReason(t, v, signature.ProvenanceMismatch)
		if !strings.Contains(v.Message, "github.com/evil/fork") {
			t.Errorf("message %q", v.Message)
		}
		// And the trusted key's provenance of the right one: both rules
		// are met, each by the trusted key's attestation.
		c.Attest(t, ref, "slsaprovenance1", testsign.SLSAProvenance("acme/api", "refs/heads/main", commit), tc.format)
		v = check(t, cfg, signature.Limits{}, tc.reg, "app", d)
		wantVerified(t, v, "key cosign.pub")
		if len(v.Attestations) != 2 {
			t.Fatalf("attestations %+v, want two", v.Attestations)
		}
		if p, s := v.Attestations[0], v.Attestations[1]; p.Name != "provenance" || p.SourceRepository != "github.com/acme/api" ||
			p.Revision != commit || p.Signer != "key cosign.pub" || p.Format != string(tc.format) ||
			s.Name != "scan" || s.Signer != "key cosign.pub" || s.Format != string(tc.format) {
			t.Errorf("attestations %+v", v.Attestations)
		}
	})
}
