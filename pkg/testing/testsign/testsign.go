// Package testsign signs images in a test registry the ways users do: with
// the real cosign CLI (keyed, as a Sigstore bundle referrer or a legacy
// .sig tag) and the real notation CLI (a test CA), both built from pinned
// modules by make sign-tools, and keyless with sigstore-go's virtual
// Sigstore (a Fulcio CA, a Rekor log and a TSA in memory: no public
// Fulcio or Rekor can be reached from tests), pushed as cosign v3 pushes
// its bundles.
package testsign

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// Target is the make target that builds the signing CLIs.
const Target = "sign-tools"

// binDir is where make sign-tools links the CLIs: $IMAGE_TOOLKIT_BIN/sign.
func binDir(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("IMAGE_TOOLKIT_BIN")
	if bin == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(root, "bin")
	}
	return filepath.Join(bin, "sign")
}

// run runs a CLI with env added, failing t with its output.
func run(t testing.TB, env []string, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Cosign is the cosign CLI with a key pair of its own.
type Cosign struct {
	bin, dir string
	// PublicKey is the key pair's public key (PEM), what a Secret's
	// cosign.pub holds.
	PublicKey []byte
	env       []string
}

// NewCosign makes a key pair with cosign generate-key-pair; the test is
// skipped (or failed, when make sign-tools was promised) without the CLI.
func NewCosign(t testing.TB) *Cosign {
	t.Helper()
	bin := filepath.Join(binDir(t), "cosign")
	testenv.NeedTool(t, bin, Target)
	dir := t.TempDir()
	// Its own home: cosign keeps no state between tests, and reaches no
	// network (--tlog-upload=false below).
	c := &Cosign{bin: bin, dir: dir, env: []string{"COSIGN_PASSWORD=test", "HOME=" + dir, "TUF_ROOT=" + filepath.Join(dir, "tuf")}}
	cmd := exec.Command(bin, "generate-key-pair")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), c.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	c.PublicKey = pub
	return c
}

// Format is how cosign stores a signature.
type Format string

const (
	// Bundle is cosign v3's default: a Sigstore bundle in a referrer
	// manifest (the referrers API, or its tag schema).
	Bundle Format = "bundle"
	// Legacy is the sha256-<hex>.sig tag of cosign v1 and v2.
	Legacy Format = "legacy"
)

// Sign signs ref (repository@digest) with the key pair, offline.
func (c *Cosign) Sign(t testing.TB, ref string, format Format) {
	t.Helper()
	run(t, c.env, c.bin, "sign", "--yes", "--key", filepath.Join(c.dir, "cosign.key"),
		"--tlog-upload=false", "--allow-http-registry", "--allow-insecure-registry",
		"--new-bundle-format="+fmt.Sprint(format == Bundle), "--use-signing-config=false", ref)
}

// Attest attests ref (repository@digest) with the key pair, offline, as
// cosign attest --type predicateType (a cosign --type name or a URI) with
// predicate (marshalled to JSON), stored in format.
func (c *Cosign) Attest(t testing.TB, ref, predicateType string, predicate any, format Format) {
	t.Helper()
	b, err := json.Marshal(predicate)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "predicate.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, c.env, c.bin, "attest", "--yes", "--key", filepath.Join(c.dir, "cosign.key"),
		"--type", predicateType, "--predicate", file,
		"--tlog-upload=false", "--allow-http-registry", "--allow-insecure-registry",
		"--new-bundle-format="+fmt.Sprint(format == Bundle), "--use-signing-config=false", ref)
}

// Notation is the notation CLI with a test CA of its own (notation cert
// generate-test: a self-signed signing certificate in its trust store).
type Notation struct {
	bin  string
	env  []string
	name string
	// Certificate is the test CA's certificate (PEM), what the trust
	// store Secret holds.
	Certificate []byte
}

// NewNotation makes a signing key and certificate named keyName.
func NewNotation(t testing.TB, keyName string) *Notation {
	t.Helper()
	bin := filepath.Join(binDir(t), "notation")
	testenv.NeedTool(t, bin, Target)
	dir := t.TempDir()
	n := &Notation{bin: bin, name: keyName, env: []string{"XDG_CONFIG_HOME=" + dir, "HOME=" + dir}}
	run(t, n.env, bin, "cert", "generate-test", "--default", keyName)
	cert, err := os.ReadFile(filepath.Join(dir, "notation", "localkeys", keyName+".crt"))
	if err != nil {
		t.Fatal(err)
	}
	n.Certificate = cert
	return n
}

// Sign signs ref (repository@digest) with the test key.
func (n *Notation) Sign(t testing.TB, ref string) {
	t.Helper()
	run(t, n.env, n.bin, "sign", "--insecure-registry", "--key", n.name, ref)
}

// TrustPolicy is a trustpolicy.json trusting the certificates of the
// trust store named store for the repositories scopes ("*" for all).
func TrustPolicy(store string, scopes ...string) []byte {
	b, _ := json.Marshal(map[string]any{
		"version": "1.0",
		"trustPolicies": []any{map[string]any{
			"name":                  "test",
			"registryScopes":        scopes,
			"signatureVerification": map[string]any{"level": "strict"},
			"trustStores":           []string{"ca:" + store},
			"trustedIdentities":     []string{"*"},
		}},
	})
	return b
}

// Sigstore is a Sigstore in memory: Fulcio, Rekor and a TSA.
type Sigstore struct {
	ca *ca.VirtualSigstore
}

// NewSigstore starts a virtual Sigstore.
func NewSigstore(t testing.TB) *Sigstore {
	t.Helper()
	v, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	return &Sigstore{ca: v}
}

// TrustedRoot is the virtual Sigstore's trusted_root.json, without its CT
// log: the virtual Fulcio's certificates carry no signed certificate
// timestamps, which a verifier requires whenever its root lists a CT log
// (a private Sigstore without one). TrustedRootWithCTLog keeps it.
func (s *Sigstore) TrustedRoot(t testing.TB) []byte {
	t.Helper()
	return s.trustedRoot(t, false)
}

// TrustedRootWithCTLog is the trusted root with the virtual CT log, as the
// public Sigstore's lists its CT logs: the certificates here, without
// SCTs, do not verify with it.
func (s *Sigstore) TrustedRootWithCTLog(t testing.TB) []byte {
	t.Helper()
	return s.trustedRoot(t, true)
}

func (s *Sigstore) trustedRoot(t testing.TB, ctLog bool) []byte {
	t.Helper()
	// The virtual Sigstore names its logs by the hex text of their IDs,
	// which would be written as the text's bytes: a trusted root holds
	// the IDs themselves.
	raw := func(logs map[string]*root.TransparencyLog) map[string]*root.TransparencyLog {
		for id, l := range logs {
			b, err := hex.DecodeString(id)
			if err != nil {
				t.Fatal(err)
			}
			l.ID = b
		}
		return logs
	}
	ct := map[string]*root.TransparencyLog{}
	if ctLog {
		ct = raw(s.ca.CTLogs())
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, s.ca.FulcioCertificateAuthorities(),
		ct, s.ca.TimestampingAuthorities(), raw(s.ca.RekorLogs()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SignImage signs repo@digest keylessly as identity (the certificate's
// subject) of issuer (the OIDC issuer), the way cosign v3 does (a DSSE
// envelope of an in-toto statement with cosign's signing predicate, its
// subject the image's digest), and pushes the bundle as cosign does: a
// referrer manifest of artifact type
// application/vnd.dev.sigstore.bundle.v0.3+json.
func (s *Sigstore) SignImage(t testing.TB, reg *testregistry.Registry, repo, digest, identity, issuer string) {
	t.Helper()
	alg, hexDigest, _ := strings.Cut(digest, ":")
	statement, _ := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"digest": map[string]string{alg: hexDigest}}},
		"predicateType": "https://sigstore.dev/cosign/sign/v1",
		"predicate":     map[string]any{},
	})
	b := s.Bundle(t, identity, issuer, statement)
	PushBundle(t, reg, repo, digest, b)
}

// SLSAProvenance is an SLSA v1 provenance as GitHub's
// attest-build-provenance writes it for a workflow run of repo (owner/name
// on github.com) at ref and commit: what cosign attest --type
// slsaprovenance1 is given, or AttestImage signs.
func SLSAProvenance(repo, ref, commit string) map[string]any {
	return map[string]any{
		"buildDefinition": map[string]any{
			"buildType": "https://actions.github.io/buildtypes/workflow/v1",
			"externalParameters": map[string]any{
				"workflow": map[string]any{"ref": ref, "repository": "https://github.com/" + repo, "path": ".github/workflows/release.yml"},
			},
			"resolvedDependencies": []any{map[string]any{
				"uri":    "git+https://github.com/" + repo + "@" + ref,
				"digest": map[string]any{"gitCommit": commit},
			}},
		},
		"runDetails": map[string]any{
			"builder":  map[string]any{"id": "https://github.com/actions/runner/github-hosted"},
			"metadata": map[string]any{"invocationId": "https://github.com/" + repo + "/actions/runs/1/attempts/1"},
		},
	}
}

// VulnReport is a vulnerability scan with critical findings, in the shape
// cosign attest --type vuln takes.
func VulnReport(critical int) map[string]any {
	return map[string]any{
		"invocation": map[string]any{"uri": "https://github.com/acme/api/actions/runs/1"},
		"scanner": map[string]any{"uri": "pkg:github/aquasecurity/trivy@0.60.0", "version": "0.60.0",
			"result": map[string]any{"summary": map[string]any{"critical": critical, "high": 3}}},
	}
}

// Statement is an in-toto statement of predicate about the digests
// (sha256:<hex>), as cosign attest writes it.
func Statement(predicateType string, predicate any, digests ...string) []byte {
	var subjects []any
	for _, d := range digests {
		alg, hexDigest, _ := strings.Cut(d, ":")
		subjects = append(subjects, map[string]any{"name": "image", "digest": map[string]string{alg: hexDigest}})
	}
	b, _ := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       subjects,
		"predicateType": predicateType,
		"predicate":     predicate,
	})
	return b
}

// AttestImage attests repo@digest keylessly as identity of issuer with an
// in-toto statement of predicate, and pushes the bundle as cosign v3 and
// GitHub's attest actions do: a bundle referrer annotated with its
// predicate type. It returns the referrer's digest.
func (s *Sigstore) AttestImage(t testing.TB, reg *testregistry.Registry, repo, digest, identity, issuer, predicateType string, predicate any) string {
	t.Helper()
	b := s.Bundle(t, identity, issuer, Statement(predicateType, predicate, digest))
	return PushAttestation(t, reg, repo, digest, predicateType, b)
}

// PushAttestation pushes bundle as an attestation referrer of repo@digest,
// annotated with predicateType (as cosign's
// WriteAttestationNewBundleFormat writes it), and returns its digest.
func PushAttestation(t testing.TB, reg *testregistry.Registry, repo, digest, predicateType string, bundle []byte) string {
	t.Helper()
	subject := Descriptor(t, reg, repo, digest)
	layer := map[string]any{"mediaType": BundleArtifactType, "digest": reg.PushBlob(t, repo, bundle), "size": len(bundle)}
	empty := []byte("{}")
	m := map[string]any{
		"schemaVersion": 2,
		"mediaType":     string(types.OCIManifestSchema1),
		"artifactType":  BundleArtifactType,
		"config":        map[string]any{"mediaType": "application/vnd.oci.empty.v1+json", "digest": reg.PushBlob(t, repo, empty), "size": len(empty)},
		"layers":        []any{layer},
		"subject":       subject,
		"annotations": map[string]string{
			"dev.sigstore.bundle.content":       "dsse-envelope",
			"dev.sigstore.bundle.predicateType": predicateType,
		},
	}
	body, _ := json.Marshal(m)
	return reg.PushManifest(t, repo, digestOf(body), types.OCIManifestSchema1, body)
}

// SignImageLegacy signs repo@digest keylessly as identity of issuer the
// way cosign v2 and older do, and pushes what they push: the
// sha256-<hex>.sig tag, a manifest whose layer is the simple-signing
// payload naming the digest, with the signature, the Fulcio certificate
// and its chain, and the Rekor entry's signed entry timestamp in the
// layer's annotations (a hashedrekord of the payload, as cosign uploads).
func (s *Sigstore) SignImageLegacy(t testing.TB, reg *testregistry.Registry, repo, digest, identity, issuer string) {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": reg.Repo(repo)},
			"image":    map[string]string{"docker-manifest-digest": digest},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	e, err := s.ca.Sign(identity, issuer, payload)
	if err != nil {
		t.Fatal(err)
	}
	vc, _ := e.VerificationContent()
	cert := vc.(*bundle.Certificate).Certificate()
	sc, _ := e.SignatureContent()
	sig := sc.MessageSignatureContent().Signature()
	entries, _ := e.TlogEntries()
	tle := entries[0].TransparencyLogEntry()
	// The signed entry timestamp, the log's promise, as Rekor returns it
	// (the virtual Sigstore's entry does not carry it).
	rp := tlog.RekorPayload{Body: base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
		IntegratedTime: tle.IntegratedTime, LogIndex: tle.LogIndex, LogID: fmt.Sprintf("%x", tle.LogId.KeyId)}
	set, err := s.ca.RekorSignPayload(rp)
	if err != nil {
		t.Fatal(err)
	}
	rekorBundle, _ := json.Marshal(map[string]any{"SignedEntryTimestamp": set, "Payload": rp})
	pemOf := func(certs ...*x509.Certificate) string {
		var b bytes.Buffer
		for _, c := range certs {
			_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
		}
		return b.String()
	}
	cas := s.ca.FulcioCertificateAuthorities()
	fulcio := cas[0].(*root.FulcioCertificateAuthority)
	layer := map[string]any{
		"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
		"digest":    reg.PushBlob(t, repo, payload),
		"size":      len(payload),
		"annotations": map[string]string{
			"dev.cosignproject.cosign/signature": base64.StdEncoding.EncodeToString(sig),
			"dev.sigstore.cosign/certificate":    pemOf(cert),
			"dev.sigstore.cosign/chain":          pemOf(append(fulcio.Intermediates, fulcio.Root)...),
			"dev.sigstore.cosign/bundle":         string(rekorBundle),
		},
	}
	cfg := []byte("{}")
	m, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     string(types.OCIManifestSchema1),
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": reg.PushBlob(t, repo, cfg), "size": len(cfg)},
		"layers":        []any{layer},
	})
	alg, hexDigest, _ := strings.Cut(digest, ":")
	reg.PushManifest(t, repo, alg+"-"+hexDigest+".sig", types.OCIManifestSchema1, m)
}

// Bundle signs payload (an in-toto statement) as identity of issuer and
// returns the Sigstore bundle (JSON).
func (s *Sigstore) Bundle(t testing.TB, identity, issuer string, payload []byte) []byte {
	t.Helper()
	e, err := s.ca.AttestAtTime(identity, issuer, payload, time.Now().Add(5*time.Minute), true)
	if err != nil {
		t.Fatal(err)
	}
	vc, _ := e.VerificationContent()
	cert := vc.(*bundle.Certificate).Certificate()
	sc, _ := e.SignatureContent()
	env := sc.(*bundle.Envelope).Envelope
	body, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := e.TlogEntries()
	tles := make([]*protorekor.TransparencyLogEntry, len(entries))
	for i, en := range entries {
		// The virtual Sigstore's entries lack what a bundle carries and
		// Rekor returns: the entry's kind and its signed entry timestamp
		// (the log's promise), signed here by the same log key.
		tle := proto.Clone(en.TransparencyLogEntry()).(*protorekor.TransparencyLogEntry)
		tle.KindVersion = &protorekor.KindVersion{Kind: "dsse", Version: "0.0.1"}
		set, err := s.ca.RekorSignPayload(tlog.RekorPayload{Body: base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
			IntegratedTime: tle.IntegratedTime, LogIndex: tle.LogIndex, LogID: fmt.Sprintf("%x", tle.LogId.KeyId)})
		if err != nil {
			t.Fatal(err)
		}
		tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
		tles[i] = tle
	}
	pb := &protobundle.Bundle{
		MediaType: "application/vnd.dev.sigstore.bundle.v0.3+json",
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content:     &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: cert.Raw}},
			TlogEntries: tles,
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: body, PayloadType: env.PayloadType, Signatures: []*protodsse.Signature{{Sig: sig}},
		}},
	}
	out, err := protojson.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// BundleArtifactType is the artifact type of cosign v3's bundle referrers.
const BundleArtifactType = "application/vnd.dev.sigstore.bundle.v0.3+json"

// PushBundle pushes content as a Sigstore bundle referrer of repo@digest,
// the manifest cosign v3 writes, and returns the referrer's digest.
func PushBundle(t testing.TB, reg *testregistry.Registry, repo, digest string, content []byte) string {
	t.Helper()
	return PushReferrer(t, reg, repo, digest, BundleArtifactType, BundleArtifactType, content)
}

// PushReferrer pushes a one-layer referrer of repo@digest: artifact type
// artifactType, the layer content of media type layerType.
func PushReferrer(t testing.TB, reg *testregistry.Registry, repo, digest, artifactType, layerType string, content []byte) string {
	t.Helper()
	subject := Descriptor(t, reg, repo, digest)
	layer := map[string]any{"mediaType": layerType, "digest": reg.PushBlob(t, repo, content), "size": len(content)}
	return PushReferrerManifest(t, reg, repo, subject, artifactType, []any{layer})
}

// PushReferrerManifest pushes an OCI manifest of artifactType with layers
// and subject, and returns its digest.
func PushReferrerManifest(t testing.TB, reg *testregistry.Registry, repo string, subject map[string]any, artifactType string, layers []any) string {
	t.Helper()
	empty := []byte("{}")
	m := map[string]any{
		"schemaVersion": 2,
		"mediaType":     string(types.OCIManifestSchema1),
		"artifactType":  artifactType,
		"config":        map[string]any{"mediaType": "application/vnd.oci.empty.v1+json", "digest": reg.PushBlob(t, repo, empty), "size": len(empty)},
		"layers":        layers,
		"subject":       subject,
	}
	body, _ := json.Marshal(m)
	return reg.PushManifest(t, repo, digestOf(body), types.OCIManifestSchema1, body)
}

// Descriptor is the descriptor of repo@digest, as a manifest's subject.
func Descriptor(t testing.TB, reg *testregistry.Registry, repo, digest string) map[string]any {
	t.Helper()
	ref, err := name.NewDigest(reg.Repo(repo)+"@"+digest, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	d, err := remote.Head(ref, reg.RemoteOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]any{"mediaType": string(d.MediaType), "digest": d.Digest.String(), "size": d.Size}
}

func digestOf(b []byte) string {
	h, _, _ := v1.SHA256(bytes.NewReader(b))
	return h.String()
}
