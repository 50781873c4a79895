package signature_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"toolkit.dev/image-toolkit/pkg/signature"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
)

// These tests attest with sigstore-go's virtual Sigstore (keyless, in
// process), pushed as cosign v3 and GitHub's attest-build-provenance push
// them; cli_test.go attests with the real cosign CLI, keyed, in both of
// its formats.

const ciIdentity = "https://github.com/acme/api/.github/workflows/release.yml@refs/heads/main"

const commit = "0123456789abcdef0123456789abcdef01234567"

func provenanceRule() signature.Attestation {
	return signature.Attestation{Name: "provenance", PredicateType: "slsaprovenance1", SLSA: signature.SLSAMatch{
		BuilderID: "https://github.com/actions/runner/github-hosted", SourceRepository: "https://github.com/acme/*", SourceRef: "refs/heads/main"}}
}

func withRules(cfg signature.Config, rules ...signature.Attestation) signature.Config {
	cfg.Attestations = rules
	return cfg
}

func TestProvenanceFromTheRightRepositoryVerifies(t *testing.T) {
	for _, r := range registries {
		t.Run(r.name, func(t *testing.T) {
			s := testsign.NewSigstore(t)
			reg := testregistry.New(t, testregistry.Options{Referrers: r.referrers})
			d := reg.Push(t, "app", "1.0.0")
			s.SignImage(t, reg, "app", d, identity, issuer)
			s.AttestImage(t, reg, "app", d, identity, issuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance("acme/api", "refs/heads/main", commit))
			v := check(t, withRules(keyless(s, t), provenanceRule()), signature.Limits{}, reg, "app", d)
			wantVerified(t, v, identity)
			if len(v.Attestations) != 1 {
				t.Fatalf("attestations %+v, want one", v.Attestations)
			}
			a := v.Attestations[0]
			if a.Name != "provenance" || a.PredicateType != signature.SLSAProvenanceV1 || a.Format != "bundle" ||
				a.Builder != "https://github.com/actions/runner/github-hosted" || a.SourceRepository != "github.com/acme/api" ||
				a.SourceRef != "refs/heads/main" || a.Revision != commit || !strings.Contains(a.Signer, identity) {
				t.Errorf("attestation %+v", a)
			}
		})
	}
}

func TestProvenanceFromAnotherRepositoryIsAMismatch(t *testing.T) {
	s := testsign.NewSigstore(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	d := reg.Push(t, "app", "1.0.0")
	s.SignImage(t, reg, "app", d, identity, issuer)
	s.AttestImage(t, reg, "app", d, identity, issuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance("evil/fork", "refs/heads/main", commit))
	v := check(t, withRules(keyless(s, t), provenanceRule()), signature.Limits{}, reg, "app", d)
	wantReason(t, v, signature.ProvenanceMismatch)
	for _, want := range []string{"attestation provenance", "source repository github.com/evil/fork does not match github.com/acme/*"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q, want it to say %q", v.Message, want)
		}
	}

	// The ref and the builder are checked as well.
	d2 := reg.Push(t, "app", "1.0.1")
	s.SignImage(t, reg, "app", d2, identity, issuer)
	s.AttestImage(t, reg, "app", d2, identity, issuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance("acme/api", "refs/heads/feature", commit))
	v = check(t, withRules(keyless(s, t), provenanceRule()), signature.Limits{}, reg, "app", d2)
	wantReason(t, v, signature.ProvenanceMismatch)
	if !strings.Contains(v.Message, "source ref refs/heads/feature does not match refs/heads/main") {
		t.Errorf("message %q", v.Message)
	}
	tags := provenanceRule()
	tags.SLSA.SourceRef = "refs/tags/v*"
	v = check(t, withRules(keyless(s, t), tags), signature.Limits{}, reg, "app", d2)
	wantReason(t, v, signature.ProvenanceMismatch)
	re := provenanceRule()
	re.SLSA.SourceRef = "^refs/heads/(main|feature)$"
	wantVerified(t, check(t, withRules(keyless(s, t), re), signature.Limits{}, reg, "app", d2), identity)
}

// v0.2, as cosign attest --type slsaprovenance and the SLSA GitHub
// generator write it: the source is the invocation's config source.
func TestSLSAProvenanceV02(t *testing.T) {
	s := testsign.NewSigstore(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	d := reg.Push(t, "app", "1.0.0")
	s.SignImage(t, reg, "app", d, identity, issuer)
	s.AttestImage(t, reg, "app", d, identity, issuer, signature.SLSAProvenanceV02, map[string]any{
		"builder":   map[string]any{"id": "https://github.com/slsa-framework/slsa-github-generator/.github/workflows/generator_container_slsa3.yml@refs/tags/v2.0.0"},
		"buildType": "https://github.com/slsa-framework/slsa-github-generator/container@v1",
		"invocation": map[string]any{"configSource": map[string]any{
			"uri": "git+https://github.com/acme/api@refs/tags/v1.0.0", "digest": map[string]any{"sha1": commit}, "entryPoint": ".github/workflows/release.yml"}},
	})
	rule := signature.Attestation{Name: "provenance", PredicateType: "slsaprovenance", SLSA: signature.SLSAMatch{
		BuilderID:        "^https://github.com/slsa-framework/slsa-github-generator/.*@refs/tags/v2\\.[0-9.]+$",
		SourceRepository: "github.com/acme/api", SourceRef: "refs/tags/v*"}}
	v := check(t, withRules(keyless(s, t), rule), signature.Limits{}, reg, "app", d)
	wantVerified(t, v, identity)
	if a := v.Attestations[0]; a.SourceRepository != "github.com/acme/api" || a.SourceRef != "refs/tags/v1.0.0" || a.Revision != commit {
		t.Errorf("attestation %+v", a)
	}
}

func TestVulnerabilityScanWithACriticalFindingBlocks(t *testing.T) {
	s := testsign.NewSigstore(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	clean, bad := reg.Push(t, "app", "1.0.0"), reg.Push(t, "app", "1.0.1")
	for d, critical := range map[string]int{clean: 0, bad: 2} {
		s.SignImage(t, reg, "app", d, identity, issuer)
		s.AttestImage(t, reg, "app", d, identity, issuer, "https://cosign.sigstore.dev/attestation/vuln/v1", testsign.VulnReport(critical))
	}
	rule := signature.Attestation{Name: "scan", PredicateType: "vuln", Conditions: []string{
		"predicate.scanner.result.summary.critical == 0", "predicateType.startsWith('https://cosign.sigstore.dev/')"}}
	wantVerified(t, check(t, withRules(keyless(s, t), rule), signature.Limits{}, reg, "app", clean), identity)
	v := check(t, withRules(keyless(s, t), rule), signature.Limits{}, reg, "app", bad)
	wantReason(t, v, signature.ProvenanceMismatch)
	if !strings.Contains(v.Message, "attestation scan") || !strings.Contains(v.Message, "predicate.scanner.result.summary.critical == 0 is false") {
		t.Errorf("message %q", v.Message)
	}
	// A field the predicate lacks does not hold: fail closed.
	missing := rule
	missing.Conditions = []string{"predicate.scanner.result.summary.unknown == 0"}
	v = check(t, withRules(keyless(s, t), missing), signature.Limits{}, reg, "app", clean)
	wantReason(t, v, signature.ProvenanceMismatch)
	if !strings.Contains(v.Message, "could not be evaluated") {
		t.Errorf("message %q", v.Message)
	}
}

func TestEveryRuleMustBeMet(t *testing.T) {
	s := testsign.NewSigstore(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	d := reg.Push(t, "app", "1.0.0")
	s.SignImage(t, reg, "app", d, identity, issuer)
	s.AttestImage(t, reg, "app", d, identity, issuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance("acme/api", "refs/heads/main", commit))
	scan := signature.Attestation{Name: "scan", PredicateType: "vuln", Conditions: []string{"predicate.scanner.result.summary.critical == 0"}}
	v := check(t, withRules(keyless(s, t), provenanceRule(), scan), signature.Limits{}, reg, "app", d)
	wantReason(t, v, signature.NoAttestation)
	for _, want := range []string{"attestation scan (https://cosign.sigstore.dev/attestation/vuln/v1): none found", "found " + signature.SLSAProvenanceV1} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q, want it to say %q", v.Message, want)
		}
	}
	s.AttestImage(t, reg, "app", d, identity, issuer, "https://cosign.sigstore.dev/attestation/vuln/v1", testsign.VulnReport(0))
	v = check(t, withRules(keyless(s, t), provenanceRule(), scan), signature.Limits{}, reg, "app", d)
	wantVerified(t, v, identity)
	if len(v.Attestations) != 2 || v.Attestations[0].Name != "provenance" || v.Attestations[1].Name != "scan" {
		t.Errorf("attestations %+v", v.Attestations)
	}
}

// An attestation is no signature: without one, the image is unsigned.
func TestAnAttestationIsNotASignature(t *testing.T) {
	s := testsign.NewSigstore(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	d := reg.Push(t, "app", "1.0.0")
	s.AttestImage(t, reg, "app", d, identity, issuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance("acme/api", "refs/heads/main", commit))
	wantReason(t, check(t, withRules(keyless(s, t), provenanceRule()), signature.Limits{}, reg, "app", d), signature.NoSignature)
}

// The CI that builds signs the provenance, a person signs releases: each
// is trusted for its own.
func TestAnAttestationHasItsOwnSigners(t *testing.T) {
	s := testsign.NewSigstore(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	d := reg.Push(t, "app", "1.0.0")
	s.SignImage(t, reg, "app", d, identity, issuer)
	s.AttestImage(t, reg, "app", d, ciIdentity, issuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance("acme/api", "refs/heads/main", commit))
	rule := provenanceRule()
	// Signed by the CI, not by the release signer the policy trusts.
	v := check(t, withRules(keyless(s, t), rule), signature.Limits{}, reg, "app", d)
	wantReason(t, v, signature.Untrusted)
	rule.Identities = []signature.Identity{{Issuer: "^" + issuer + "$", Subject: "^https://github.com/acme/api/.github/workflows/release.yml@refs/heads/main$"}}
	v = check(t, withRules(keyless(s, t), rule), signature.Limits{}, reg, "app", d)
	wantVerified(t, v, identity)
	if !strings.Contains(v.Attestations[0].Signer, ciIdentity) {
		t.Errorf("attestation signer %q, want the CI", v.Attestations[0].Signer)
	}
	// The release signer's own provenance is not the CI's.
	d2 := reg.Push(t, "app", "1.0.1")
	s.SignImage(t, reg, "app", d2, identity, issuer)
	s.AttestImage(t, reg, "app", d2, identity, issuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance("acme/api", "refs/heads/main", commit))
	wantReason(t, check(t, withRules(keyless(s, t), rule), signature.Limits{}, reg, "app", d2), signature.Untrusted)
}

// Hostile attestations: a statement about another digest, a signature
// that does not verify, JSON that does not parse, a predicate larger
// than the caps. Each is a verdict with a reason, and a good attestation
// beside them still counts.
func TestHostileAttestations(t *testing.T) {
	s := testsign.NewSigstore(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	good := testsign.SLSAProvenance("acme/api", "refs/heads/main", commit)
	signed := func(tag string) string {
		d := reg.Push(t, "app", tag)
		s.SignImage(t, reg, "app", d, identity, issuer)
		return d
	}
	cfg := withRules(keyless(s, t), provenanceRule())

	t.Run("subject is another digest", func(t *testing.T) {
		d, other := signed("1.0.0"), reg.Push(t, "app", "other")
		b := s.Bundle(t, identity, issuer, testsign.Statement(signature.SLSAProvenanceV1, good, other))
		testsign.PushAttestation(t, reg, "app", d, signature.SLSAProvenanceV1, b)
		v := check(t, cfg, signature.Limits{}, reg, "app", d)
		wantReason(t, v, signature.Untrusted)
	})
	t.Run("bad signature", func(t *testing.T) {
		d := signed("1.0.1")
		b := s.Bundle(t, identity, issuer, testsign.Statement(signature.SLSAProvenanceV1, good, d))
		// Another statement under the same signature: the payload is
		// base64 in the bundle's JSON.
		var bun map[string]any
		if err := json.Unmarshal(b, &bun); err != nil {
			t.Fatal(err)
		}
		evil, _ := json.Marshal(json.RawMessage(testsign.Statement(signature.SLSAProvenanceV1, testsign.SLSAProvenance("acme/api", "refs/heads/main", strings.Repeat("f", 40)), d)))
		bun["dsseEnvelope"].(map[string]any)["payload"] = evil
		tampered, _ := json.Marshal(bun)
		testsign.PushAttestation(t, reg, "app", d, signature.SLSAProvenanceV1, tampered)
		v := check(t, cfg, signature.Limits{}, reg, "app", d)
		if v.Verified || (v.Reason != signature.Untrusted && v.Reason != signature.Malformed) {
			t.Fatalf("verdict %s, want Untrusted or Malformed", v)
		}
		// The good one beside it still counts.
		s.AttestImage(t, reg, "app", d, identity, issuer, signature.SLSAProvenanceV1, good)
		wantVerified(t, check(t, cfg, signature.Limits{}, reg, "app", d), identity)
	})
	t.Run("malformed JSON", func(t *testing.T) {
		d := signed("1.0.2")
		testsign.PushAttestation(t, reg, "app", d, signature.SLSAProvenanceV1, []byte(`{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "dsseEnvelope": {`))
		wantReason(t, check(t, cfg, signature.Limits{}, reg, "app", d), signature.Malformed)
	})
	t.Run("unknown predicate type", func(t *testing.T) {
		d := signed("1.0.3")
		s.AttestImage(t, reg, "app", d, identity, issuer, "https://example.com/unknown/v9", map[string]any{"x": 1})
		v := check(t, cfg, signature.Limits{}, reg, "app", d)
		wantReason(t, v, signature.NoAttestation)
		if !strings.Contains(v.Message, "found https://example.com/unknown/v9") {
			t.Errorf("message %q", v.Message)
		}
	})
	t.Run("100 MB predicate", func(t *testing.T) {
		d := signed("1.0.4")
		// Refused by its size before anything of it is parsed or
		// verified, so it needs no real signature.
		huge := append([]byte(`{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "dsseEnvelope": {"payload": "`),
			bytes.Repeat([]byte("A"), 100<<20)...)
		huge = append(huge, `", "payloadType": "application/vnd.in-toto+json"}}`...)
		testsign.PushAttestation(t, reg, "app", d, signature.SLSAProvenanceV1, huge)
		v := check(t, cfg, signature.Limits{}, reg, "app", d)
		wantReason(t, v, signature.TooLarge)
	})
}

// Thousands of attestations of other types cost nothing: the annotation
// says what a referrer holds, so only the bundles of the rule's type are
// read, wherever they are in the list.
func TestThousandsOfAttestationReferrers(t *testing.T) {
	s := testsign.NewSigstore(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	d := reg.Push(t, "app", "1.0.0")
	s.SignImage(t, reg, "app", d, identity, issuer)
	s.AttestImage(t, reg, "app", d, identity, issuer, signature.SLSAProvenanceV1, testsign.SLSAProvenance("acme/api", "refs/heads/main", commit))
	ref, err := name.NewDigest(reg.Repo("app")+"@"+d, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	real, err := remote.Referrers(ref, reg.RemoteOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	im, err := real.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var manifests []any
	for i := range 5000 {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		manifests = append(manifests, map[string]any{"mediaType": string(types.OCIManifestSchema1),
			"digest": fmt.Sprintf("sha256:%x", b), "size": 500, "artifactType": testsign.BundleArtifactType,
			"annotations": map[string]string{"dev.sigstore.bundle.predicateType": fmt.Sprintf("https://example.com/sbom/v%d", i%50)}})
	}
	for _, m := range im.Manifests {
		manifests = append(manifests, m)
	}
	answerReferrers(reg, manifests)
	before := reg.ManifestRequests()
	v := check(t, withRules(keyless(s, t), provenanceRule()), signature.Limits{Referrers: 10}, reg, "app", d)
	wantVerified(t, v, identity)
	// The list once, and the signature's and the provenance's manifests.
	if n := reg.ManifestRequests() - before; n > 3 {
		t.Errorf("%d manifest requests, want 3", n)
	}
}

// A .att tag of more attestations than Limits.Referrers is refused
// unread: each would be a payload to fetch and a signature to check.
func TestAnAttTagOfHundredsIsRefusedUnread(t *testing.T) {
	s := testsign.NewSigstore(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	d := reg.Push(t, "app", "1.0.0")
	s.SignImage(t, reg, "app", d, identity, issuer)
	payload := []byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}`)
	blob := reg.PushBlob(t, "app", payload)
	var layers []any
	// 500: cosign refuses more than 1,000 layers itself (Malformed).
	for i := range 500 {
		layers = append(layers, map[string]any{"mediaType": "application/vnd.dsse.envelope.v1+json", "digest": blob, "size": len(payload),
			"annotations": map[string]string{"predicateType": signature.SLSAProvenanceV1, "n": fmt.Sprint(i)}})
	}
	empty := []byte("{}")
	m, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": string(types.OCIManifestSchema1),
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": reg.PushBlob(t, "app", empty), "size": len(empty)},
		"layers": layers})
	alg, hexDigest, _ := strings.Cut(d, ":")
	reg.PushManifest(t, "app", alg+"-"+hexDigest+".att", types.OCIManifestSchema1, m)
	before := reg.BlobRequests()
	v := check(t, withRules(keyless(s, t), provenanceRule()), signature.Limits{}, reg, "app", d)
	wantReason(t, v, signature.TooManyReferrers)
	if !strings.Contains(v.Message, "500 attestations") {
		t.Errorf("message %q", v.Message)
	}
	if n := reg.BlobRequests() - before; n > 2 {
		t.Errorf("%d blob reads for a refused .att tag, want at most the signature's", n)
	}
}

func TestBadRulesAreConfigErrors(t *testing.T) {
	s := testsign.NewSigstore(t)
	for name, rule := range map[string]signature.Attestation{
		"no name":                 {PredicateType: "vuln"},
		"unknown type":            {Name: "x", PredicateType: "slsa"},
		"slsa on a vuln scan":     {Name: "x", PredicateType: "vuln", SLSA: signature.SLSAMatch{SourceRef: "refs/heads/main"}},
		"bad glob":                {Name: "x", PredicateType: "slsaprovenance1", SLSA: signature.SLSAMatch{SourceRef: "refs/[heads"}},
		"bad regular expression":  {Name: "x", PredicateType: "slsaprovenance1", SLSA: signature.SLSAMatch{BuilderID: "^(x$"}},
		"CEL that does not parse": {Name: "x", PredicateType: "vuln", Conditions: []string{"predicate.x =="}},
		"CEL that is no bool":     {Name: "x", PredicateType: "vuln", Conditions: []string{"'a' + 'b'"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := signature.New(withRules(keyless(s, t), rule), signature.Limits{})
			var ce *signature.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a ConfigError", err)
			}
			if !strings.Contains(err.Error(), "attestations[0]") {
				t.Errorf("error %q does not name the rule", err)
			}
		})
	}
	// Keyed verification has no identities to narrow.
	keyedRule := signature.Attestation{Name: "x", PredicateType: "vuln", Identities: []signature.Identity{{Issuer: "^a$", Subject: "^b$"}}}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	keyed := signature.Config{Provider: signature.Cosign, Keys: map[string][]byte{"k.pub": pub}}
	if _, err := signature.New(keyed, signature.Limits{}); err != nil {
		t.Fatal(err)
	}
	keyed.Attestations = []signature.Attestation{keyedRule}
	if _, err := signature.New(keyed, signature.Limits{}); err == nil || !strings.Contains(err.Error(), "attestations[0].matchOIDCIdentity") {
		t.Errorf("keyless identities on a keyed config: %v", err)
	}
}

// A verdict is cached by Config.ID: another rule set is another ID.
func TestRulesAreInTheConfigID(t *testing.T) {
	s := testsign.NewSigstore(t)
	base := keyless(s, t)
	a, b := withRules(base, provenanceRule()), provenanceRule()
	b.SLSA.SourceRef = "refs/tags/*"
	if base.ID() == a.ID() || a.ID() == withRules(base, b).ID() {
		t.Error("rules do not change the config's ID")
	}
	if a.ID() != withRules(base, provenanceRule()).ID() {
		t.Error("the same rules give another ID")
	}
}
