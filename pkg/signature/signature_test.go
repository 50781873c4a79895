package signature_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"toolkit.dev/image-toolkit/pkg/signature"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
)

const (
	issuer   = "https://token.actions.example.com"
	identity = "release@example.com"
)

// registries are the two ways signatures are found: the OCI 1.1
// referrers API, and the referrers tag schema of registries without it
// (GHCR).
var registries = []struct {
	name      string
	referrers bool
}{{"referrers API", true}, {"tag schema", false}}

func check(t *testing.T, cfg signature.Config, limits signature.Limits, reg *testregistry.Registry, repo, digest string) signature.Verdict {
	t.Helper()
	v, err := signature.New(cfg, limits)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(reg.Repo(repo)+"@"+digest, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	verdict, err := v.Verify(context.Background(), ref, signature.Access{Insecure: true, Transport: reg.Transport()})
	if err != nil {
		t.Fatalf("verify %s: %v", digest, err)
	}
	if verdict.Digest != digest {
		t.Errorf("verdict for %s, want %s", verdict.Digest, digest)
	}
	return verdict
}

func keyless(s *testsign.Sigstore, t *testing.T, ids ...signature.Identity) signature.Config {
	if len(ids) == 0 {
		ids = []signature.Identity{{Issuer: "^" + issuer + "$", Subject: "^" + identity + "$"}}
	}
	return signature.Config{Provider: signature.Cosign, Identities: ids, TrustedRoot: s.TrustedRoot(t)}
}

func wantVerified(t *testing.T, v signature.Verdict, signer string) {
	t.Helper()
	if !v.Verified {
		t.Fatalf("not verified: %s", v)
	}
	if !strings.Contains(v.Signer, signer) {
		t.Errorf("signer %q, want it to name %q", v.Signer, signer)
	}
}

func wantReason(t *testing.T, v signature.Verdict, reason signature.Reason) {
	t.Helper()
	if v.Verified {
		t.Fatalf("verified (%s), want %s", v, reason)
	}
	if v.Reason != reason {
		t.Fatalf("reason %s (%s), want %s", v.Reason, v.Message, reason)
	}
}

func TestKeylessBundleVerifiesWithItsRootAndIdentity(t *testing.T) {
	for _, r := range registries {
		t.Run(r.name, func(t *testing.T) {
			reg := testregistry.New(t, testregistry.Options{Referrers: r.referrers})
			s := testsign.NewSigstore(t)
			d := reg.Push(t, "app", "1.0.0")
			s.SignImage(t, reg, "app", d, identity, issuer)
			v := check(t, keyless(s, t), signature.Limits{}, reg, "app", d)
			wantVerified(t, v, identity)
			if v.Format != "bundle" || !strings.Contains(v.Signer, issuer) {
				t.Errorf("verdict %+v: want a bundle naming the issuer", v)
			}
		})
	}
}

// A keyless signature in the legacy .sig format, as cosign v2 pushes it
// from a CI workflow (certificate, chain and Rekor bundle in the layer's
// annotations), verifies with the trusted root and identity, and not with
// another identity or another Sigstore's root.
func TestKeylessLegacySignatureVerifies(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	s := testsign.NewSigstore(t)
	d := reg.Push(t, "app", "1.0.0")
	s.SignImageLegacy(t, reg, "app", d, identity, issuer)
	v := check(t, keyless(s, t), signature.Limits{}, reg, "app", d)
	wantVerified(t, v, identity)
	if v.Format != "legacy" || !strings.Contains(v.Signer, issuer) {
		t.Errorf("verdict %+v: want legacy naming the issuer", v)
	}
	other := keyless(s, t)
	other.Identities = []signature.Identity{{Issuer: "^" + issuer + "$", Subject: "^mallory@example.com$"}}
	if v := check(t, other, signature.Limits{}, reg, "app", d); v.Verified || v.Reason != signature.Untrusted {
		t.Errorf("another identity: verdict %+v, want Untrusted", v)
	}
	if v := check(t, keyless(testsign.NewSigstore(t), t), signature.Limits{}, reg, "app", d); v.Verified || v.Reason != signature.Untrusted {
		t.Errorf("another Sigstore's root: verdict %+v, want Untrusted", v)
	}
}

// Where the trusted root lists a CT log, as the public Sigstore's does, a
// keyless certificate must carry its signed certificate timestamp, in
// either format, as cosign verify requires by default: the virtual
// Fulcio's certificates carry none, so they are Untrusted.
func TestKeylessCertificateWithoutSCTIsUntrustedWhereTheRootListsCTLogs(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	bundled := reg.Push(t, "app", "1.0.0")
	s.SignImage(t, reg, "app", bundled, identity, issuer)
	legacy := reg.Push(t, "app", "1.1.0")
	s.SignImageLegacy(t, reg, "app", legacy, identity, issuer)
	cfg := keyless(s, t)
	cfg.TrustedRoot = s.TrustedRootWithCTLog(t)
	for _, d := range []string{bundled, legacy} {
		v := check(t, cfg, signature.Limits{}, reg, "app", d)
		if v.Verified || v.Reason != signature.Untrusted || !strings.Contains(strings.ToLower(v.Message), "sct") {
			t.Errorf("%s: verdict %+v, want Untrusted for the missing SCT", d, v)
		}
	}
}

func TestKeylessWrongIdentityOrRootIsUntrusted(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	d := reg.Push(t, "app", "1.0.0")
	s.SignImage(t, reg, "app", d, "mallory@example.com", issuer)
	wantReason(t, check(t, keyless(s, t), signature.Limits{}, reg, "app", d), signature.Untrusted)

	// The right identity from another Sigstore (another Fulcio CA).
	other := testsign.NewSigstore(t)
	d2 := reg.Push(t, "app", "2.0.0")
	other.SignImage(t, reg, "app", d2, identity, issuer)
	wantReason(t, check(t, keyless(s, t), signature.Limits{}, reg, "app", d2), signature.Untrusted)

	// Of several identities, any one verifies.
	v := check(t, keyless(s, t, signature.Identity{Issuer: "^https://nope$", Subject: ".*"},
		signature.Identity{Issuer: "^" + issuer + "$", Subject: "^mallory@"}), signature.Limits{}, reg, "app", d)
	wantVerified(t, v, "mallory@example.com")
}

func TestUnsignedDigestHasNoSignature(t *testing.T) {
	for _, r := range registries {
		t.Run(r.name, func(t *testing.T) {
			reg := testregistry.New(t, testregistry.Options{Referrers: r.referrers})
			s := testsign.NewSigstore(t)
			d := reg.Push(t, "app", "1.0.0")
			wantReason(t, check(t, keyless(s, t), signature.Limits{}, reg, "app", d), signature.NoSignature)
		})
	}
}

// A signature names one digest: a bundle over another image attached to
// this one does not sign it, nor does an attestation by the trusted
// signer (an SBOM is not an approval to deploy).
func TestOnlyASignatureOverThisDigestCounts(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	signed := reg.Push(t, "app", "1.0.0")
	other := reg.Push(t, "app", "2.0.0")
	alg, hex, _ := strings.Cut(signed, ":")
	stmt := func(predicate string) []byte {
		b, _ := json.Marshal(map[string]any{"_type": "https://in-toto.io/Statement/v1",
			"subject":       []any{map[string]any{"digest": map[string]string{alg: hex}}},
			"predicateType": predicate, "predicate": map[string]any{}})
		return b
	}
	testsign.PushBundle(t, reg, "app", other, s.Bundle(t, identity, issuer, stmt("https://sigstore.dev/cosign/sign/v1")))
	wantReason(t, check(t, keyless(s, t), signature.Limits{}, reg, "app", other), signature.Untrusted)

	testsign.PushBundle(t, reg, "app", signed, s.Bundle(t, identity, issuer, stmt("https://spdx.dev/Document")))
	v := check(t, keyless(s, t), signature.Limits{}, reg, "app", signed)
	wantReason(t, v, signature.Untrusted)
	if !strings.Contains(v.Message, "attestation") {
		t.Errorf("message %q does not say it is an attestation", v.Message)
	}
}

// Hostile registries: each answer gets a reason, never a panic or a hang,
// and a bad referrer does not hide a good one.
func TestMalformedBundleIsSkippedForAGoodOne(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	d := reg.Push(t, "app", "1.0.0")
	testsign.PushBundle(t, reg, "app", d, []byte(`{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "verificationMaterial": 7}`))
	wantReason(t, check(t, keyless(s, t), signature.Limits{}, reg, "app", d), signature.Malformed)
	testsign.PushBundle(t, reg, "app", d, []byte("not json at all \x00\xff"))
	s.SignImage(t, reg, "app", d, identity, issuer)
	wantVerified(t, check(t, keyless(s, t), signature.Limits{}, reg, "app", d), identity)
}

func TestHugeSignatureBlobIsRefusedUnread(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	d := reg.Push(t, "app", "1.0.0")
	huge := bytes.Repeat([]byte("A"), 8<<20)
	testsign.PushBundle(t, reg, "app", d, huge)
	before := reg.BlobRequests()
	wantReason(t, check(t, keyless(s, t), signature.Limits{}, reg, "app", d), signature.TooLarge)
	// The descriptor says 8 MiB: the config blob is not read either.
	if n := reg.BlobRequests() - before; n != 0 {
		t.Errorf("%d blob requests for a blob over the cap", n)
	}

	// A descriptor that lies about the size is cut off by the transport.
	d2 := reg.Push(t, "app", "2.0.0")
	blob := reg.PushBlob(t, "app", huge)
	testsign.PushReferrerManifest(t, reg, "app", testsign.Descriptor(t, reg, "app", d2), testsign.BundleArtifactType,
		[]any{map[string]any{"mediaType": testsign.BundleArtifactType, "digest": blob, "size": 1000}})
	wantReason(t, check(t, keyless(s, t), signature.Limits{}, reg, "app", d2), signature.TooLarge)
}

// Referrers that name each other as subjects, listed by a hand-written
// referrers tag: nothing is followed recursively, so nothing loops.
func TestReferrerLoopEnds(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	s := testsign.NewSigstore(t)
	d := reg.Push(t, "app", "1.0.0")
	layer := []any{map[string]any{"mediaType": testsign.BundleArtifactType, "digest": reg.PushBlob(t, "app", []byte("{}")), "size": 2}}
	imgDesc := testsign.Descriptor(t, reg, "app", d)
	m1 := testsign.PushReferrerManifest(t, reg, "app", imgDesc, testsign.BundleArtifactType, layer)
	m2 := testsign.PushReferrerManifest(t, reg, "app", testsign.Descriptor(t, reg, "app", m1), testsign.BundleArtifactType, layer)
	desc := func(dg string) map[string]any {
		return map[string]any{"mediaType": string(types.OCIManifestSchema1), "digest": dg, "size": testsign.Descriptor(t, reg, "app", dg)["size"], "artifactType": testsign.BundleArtifactType}
	}
	// The referrers tag of d lists m2 (whose subject is m1) and, again,
	// the tag's own earlier index.
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": string(types.OCIImageIndex),
		"manifests": []any{desc(m2), desc(m1), desc(m2)}})
	tag := strings.Replace(d, ":", "-", 1)
	first := reg.PushManifest(t, "app", tag, types.OCIImageIndex, idx)
	idx, _ = json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": string(types.OCIImageIndex),
		"manifests": []any{desc(m2), map[string]any{"mediaType": string(types.OCIImageIndex), "digest": first, "size": len(idx), "artifactType": testsign.BundleArtifactType}}})
	reg.PushManifest(t, "app", tag, types.OCIImageIndex, idx)
	done := make(chan signature.Verdict)
	go func() { done <- check(t, keyless(s, t), signature.Limits{}, reg, "app", d) }()
	select {
	case v := <-done:
		wantReason(t, v, signature.Malformed)
	case <-time.After(time.Minute):
		t.Fatal("verification of a referrer loop did not end")
	}
}

// answerReferrers makes reg answer every referrers request with an index
// of manifests: no registry stores an index of manifests it does not
// have; a hostile one answers with it all the same.
func answerReferrers(reg *testregistry.Registry, manifests []any) {
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": string(types.OCIImageIndex), "manifests": manifests})
	reg.Intercept(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "/referrers/") {
			return false
		}
		w.Header().Set("Content-Type", string(types.OCIImageIndex))
		_, _ = w.Write(idx)
		return true
	})
}

// Thousands of referrers: at most Limits.Referrers are examined, and a
// referrers list over the manifest cap is not read whole.
func TestThousandsOfReferrers(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	d := reg.Push(t, "app", "1.0.0")
	var manifests []any
	for range 5000 {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		manifests = append(manifests, map[string]any{"mediaType": string(types.OCIManifestSchema1),
			"digest": fmt.Sprintf("sha256:%x", b), "size": 500, "artifactType": testsign.BundleArtifactType})
	}
	answerReferrers(reg, manifests)
	before := reg.ManifestRequests()
	v := check(t, keyless(s, t), signature.Limits{Referrers: 10}, reg, "app", d)
	wantReason(t, v, signature.TooManyReferrers)
	// Ten referrers, and the legacy .sig tag.
	if n := reg.ManifestRequests() - before; n > 12 {
		t.Errorf("%d manifest requests for 5000 referrers with a limit of 10", n)
	}
	if !strings.Contains(v.Message, "5000") {
		t.Errorf("message %q does not count the referrers", v.Message)
	}

	wantReason(t, check(t, keyless(s, t), signature.Limits{Manifest: 64 << 10}, reg, "app", d), signature.TooLarge)
}

// A registry that cannot be asked is an error, not a verdict: nothing
// about the image is known, and nothing may be cached.
func TestUnreachableRegistryIsAnErrorNotAVerdict(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	s := testsign.NewSigstore(t)
	v, err := signature.New(keyless(s, t), signature.Limits{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.NewDigest(strings.TrimPrefix(srv.URL, "http://")+"/app@sha256:"+strings.Repeat("a", 64), name.Insecure)
	if verdict, err := v.Verify(context.Background(), ref, signature.Access{Insecure: true}); err == nil {
		t.Fatalf("verdict %s from a registry answering 503", verdict)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]signature.Config{
		"no provider":       {},
		"cosign, no trust":  {Provider: signature.Cosign},
		"bad key":           {Provider: signature.Cosign, Keys: map[string][]byte{"a.pub": []byte("nope")}},
		"bad regexp":        {Provider: signature.Cosign, Identities: []signature.Identity{{Issuer: "(", Subject: ".*"}}},
		"empty subject":     {Provider: signature.Cosign, Identities: []signature.Identity{{Issuer: ".*"}}},
		"bad trusted root":  {Provider: signature.Cosign, Identities: []signature.Identity{{Issuer: ".*", Subject: ".*"}}, TrustedRoot: []byte("{")},
		"notation, nothing": {Provider: signature.Notation},
		"notation, bad policy": {Provider: signature.Notation, TrustPolicy: []byte(`{"version":"1.0"}`),
			Certificates: map[string][]byte{"ca.crt": []byte("x")}},
	} {
		if _, err := signature.New(cfg, signature.Limits{}); err == nil {
			t.Errorf("%s: no error", name)
		} else if _, ok := err.(*signature.ConfigError); !ok {
			t.Errorf("%s: %T %v, want a *ConfigError", name, err, err)
		}
	}
}

// One config, one ID; any change to what is trusted, another.
func TestConfigIDNamesWhatIsTrusted(t *testing.T) {
	a := signature.Config{Provider: signature.Cosign, Keys: map[string][]byte{"a.pub": []byte("A"), "b.pub": []byte("B")}}
	b := signature.Config{Provider: signature.Cosign, Keys: map[string][]byte{"b.pub": []byte("B"), "a.pub": []byte("A")}}
	if a.ID() != b.ID() {
		t.Error("the same keys in another order have another ID")
	}
	c := signature.Config{Provider: signature.Cosign, Keys: map[string][]byte{"a.pub": []byte("A"), "b.pub": []byte("C")}}
	if a.ID() == c.ID() {
		t.Error("another key has the same ID")
	}
}
