package signature

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Provider names a signature scheme.
type Provider string

const (
	// Cosign verifies Sigstore signatures: bundles found through the OCI
	// referrers API (or its tag schema) and legacy .sig tags.
	Cosign Provider = "cosign"
	// Notation verifies Notary Project signatures.
	Notation Provider = "notation"
)

// Reason says why a digest did not verify.
type Reason string

const (
	// NoSignature: no signature of the provider's formats names the digest.
	NoSignature Reason = "NoSignature"
	// Untrusted: signatures exist, but none verifies with the configured
	// keys, identities or trust policy (a wrong key, a wrong identity, a
	// signature over another digest).
	Untrusted Reason = "Untrusted"
	// Malformed: a signature, bundle or manifest does not parse.
	Malformed Reason = "Malformed"
	// TooLarge: a manifest, referrers list or blob is above Limits.
	TooLarge Reason = "TooLarge"
	// TooManyReferrers: more signature referrers than Limits.Referrers and
	// none of the ones examined verifies.
	TooManyReferrers Reason = "TooManyReferrers"
	// NoAttestation: the signature verifies, but no attestation of a
	// required predicate type names the digest.
	NoAttestation Reason = "NoAttestation"
	// ProvenanceMismatch: a trusted attestation of a required predicate
	// type names the digest, and it does not say what its rule requires
	// (another source repository, ref or builder; a condition false).
	ProvenanceMismatch Reason = "ProvenanceMismatch"
)

// Identity is a keyless signer: regular expressions over the OIDC issuer
// and subject (the certificate's SAN) of its Fulcio certificate, each
// anchored by the caller when it means a whole match.
type Identity struct {
	Issuer  string
	Subject string
}

// Config is what a policy trusts. Its ID names it for caching verdicts.
type Config struct {
	Provider Provider
	// Keys are cosign public keys (PEM) by name, e.g. the keys of a
	// Secret ending in .pub; a signature verifies with any of them.
	Keys map[string][]byte
	// Identities are the keyless signers trusted (cosign without Keys).
	Identities []Identity
	// TrustedRoot is a Sigstore trusted_root.json for keyless
	// verification; nil means the public Sigstore root, fetched through
	// its TUF repository.
	TrustedRoot []byte
	// TrustPolicy is a Notation trustpolicy.json.
	TrustPolicy []byte
	// Certificates are the Notation trust store's certificates (PEM or
	// DER) by name; see trustStore.
	Certificates map[string][]byte
	// Attestations must each be met besides the signature (cosign only).
	Attestations []Attestation
}

// ID is a digest of everything the config trusts: verdicts cached under
// one ID hold for every policy with the same config.
func (c Config) ID() string {
	h := sha256.New()
	fmt.Fprintf(h, "provider=%s\x00", c.Provider)
	for _, k := range sortedKeys(c.Keys) {
		fmt.Fprintf(h, "key=%s\x00%x\x00", k, sha256.Sum256(c.Keys[k]))
	}
	for _, id := range c.Identities {
		fmt.Fprintf(h, "id=%s\x00%s\x00", id.Issuer, id.Subject)
	}
	fmt.Fprintf(h, "root=%x\x00", sha256.Sum256(c.TrustedRoot))
	fmt.Fprintf(h, "policy=%x\x00", sha256.Sum256(c.TrustPolicy))
	for _, k := range sortedKeys(c.Certificates) {
		fmt.Fprintf(h, "cert=%s\x00%x\x00", k, sha256.Sum256(c.Certificates[k]))
	}
	for _, a := range c.Attestations {
		fmt.Fprintf(h, "att=%q\x00%q\x00%q\x00%q\x00%q\x00%q\x00", a.Name, a.PredicateType,
			a.SLSA.BuilderID, a.SLSA.SourceRepository, a.SLSA.SourceRef, a.SLSA.BuildType)
		for _, id := range a.Identities {
			fmt.Fprintf(h, "att-id=%q\x00%q\x00", id.Issuer, id.Subject)
		}
		for _, cond := range a.Conditions {
			fmt.Fprintf(h, "att-cond=%q\x00", cond)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Verdict is the outcome of verifying one digest.
type Verdict struct {
	// Digest is the digest verified (sha256:...).
	Digest string `json:"digest"`
	// Verified says a trusted signature names Digest.
	Verified bool `json:"verified"`
	// Signer is who verified it: a key's name ("key cosign.pub"), a
	// keyless identity ("subject ... issued by ..."), or a Notation
	// certificate's subject.
	Signer string `json:"signer,omitempty"`
	// Format is where the signature was: "bundle", "legacy" or "notation".
	Format string `json:"format,omitempty"`
	// Attestations are the attestations that met Config.Attestations,
	// one per rule, when Verified.
	Attestations []meta.Attestation `json:"attestations,omitempty"`
	// FailedAttestation is the predicate type of the attestation rule
	// that was not met, when the signature verified and a rule decided.
	FailedAttestation string `json:"failedAttestation,omitempty"`
	// Reason and Message say why not, when not Verified.
	Reason  Reason `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Requests is how many registry requests the verification made (not
	// cached: it describes one run, not the digest).
	Requests int64 `json:"-"`
}

func (v Verdict) String() string {
	if v.Verified {
		s := fmt.Sprintf("%s verified (%s signature, %s)", v.Digest, v.Format, v.Signer)
		for _, a := range v.Attestations {
			s += fmt.Sprintf("; attestation %s (%s)", a.Name, a.Signer)
		}
		return s
	}
	return fmt.Sprintf("%s not verified: %s: %s", v.Digest, v.Reason, v.Message)
}

// Limits bound what one verification reads from a registry.
type Limits struct {
	// Manifest caps a manifest or referrers list, in bytes.
	Manifest int64
	// Blob caps a signature blob (bundle, payload, envelope), in bytes.
	Blob int64
	// Referrers caps the signature referrers examined per digest.
	Referrers int
	// Timeout bounds one verification, registry requests included.
	Timeout time.Duration
}

// DefaultLimits are generous for real signatures (a bundle is a few KiB, a
// referrers list of a few hundred signatures well under a MiB) and small
// enough that a hostile registry costs little.
var DefaultLimits = Limits{Manifest: 4 << 20, Blob: 4 << 20, Referrers: 64, Timeout: 60 * time.Second}

// Access is how to reach a repository's registry.
type Access struct {
	// Auth authenticates; anonymous when nil.
	Auth authn.Authenticator
	// Transport carries TLS and proxy settings; http.DefaultTransport
	// when nil.
	Transport http.RoundTripper
	// Insecure uses plain HTTP.
	Insecure bool
}

// Verifier verifies digests against one Config. It is safe for
// concurrent use.
type Verifier struct {
	cfg    Config
	id     string
	limits Limits
	cosign *cosignVerifier
	notary *notationVerifier
}

// ConfigError is a Config that cannot be used: a key or certificate that
// does not parse, a regular expression that does not compile, a trust
// policy that is not valid. Retrying does not help.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configErrorf(format string, args ...any) error {
	return &ConfigError{Err: fmt.Errorf(format, args...)}
}

// New checks cfg and returns its Verifier; limits zero fields take
// DefaultLimits.
func New(cfg Config, limits Limits) (*Verifier, error) {
	if limits.Manifest <= 0 {
		limits.Manifest = DefaultLimits.Manifest
	}
	if limits.Blob <= 0 {
		limits.Blob = DefaultLimits.Blob
	}
	if limits.Referrers <= 0 {
		limits.Referrers = DefaultLimits.Referrers
	}
	if limits.Timeout <= 0 {
		limits.Timeout = DefaultLimits.Timeout
	}
	v := &Verifier{cfg: cfg, id: cfg.ID(), limits: limits}
	var err error
	switch cfg.Provider {
	case Cosign:
		v.cosign, err = newCosign(cfg)
	case Notation:
		v.notary, err = newNotation(cfg)
	default:
		err = configErrorf("provider %q is not cosign or notation", cfg.Provider)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// ID is the config's ID (Config.ID).
func (v *Verifier) ID() string { return v.id }

// Verify verifies the image ref (a digest reference) with access. A
// Verdict is returned for every answer the registry gave, verified or not;
// an error only when the registry could not be asked (and then nothing
// should be cached).
func (v *Verifier) Verify(ctx context.Context, ref name.Digest, access Access) (Verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, v.limits.Timeout)
	defer cancel()
	if access.Insecure && ref.Scheme() != "http" {
		if r, err := name.NewDigest(ref.String(), name.Insecure); err == nil {
			ref = r
		}
	}
	f := newFetcher(ctx, ref, access, v.limits)
	var verdict Verdict
	var err error
	if v.cosign != nil {
		verdict, err = v.cosign.verify(ctx, f)
	} else {
		verdict, err = v.notary.verify(ctx, f)
	}
	verdict.Digest = ref.DigestStr()
	if err != nil {
		var h *hostile
		if !errors.As(err, &h) {
			return Verdict{Digest: ref.DigestStr(), Requests: f.requests.Load()}, err
		}
		verdict = reject(ref.DigestStr(), h.reason, h.msg)
	}
	verdict.Requests = f.requests.Load()
	return verdict, nil
}

// hostile is an answer of the registry that decides the verdict: too
// large, malformed. It travels as an error inside one verification.
type hostile struct {
	reason Reason
	msg    string
}

func (h *hostile) Error() string { return string(h.reason) + ": " + h.msg }

func hostilef(reason Reason, format string, args ...any) error {
	return &hostile{reason: reason, msg: fmt.Sprintf(format, args...)}
}

func reject(digest string, reason Reason, msg string) Verdict {
	return Verdict{Digest: digest, Reason: reason, Message: msg}
}

// compileIdentities checks the identities' regular expressions.
func compileIdentities(ids []Identity) error {
	for i, id := range ids {
		if strings.TrimSpace(id.Issuer) == "" || strings.TrimSpace(id.Subject) == "" {
			return configErrorf("matchOIDCIdentity[%d]: issuer and subject are both required", i)
		}
		if _, err := regexp.Compile(id.Issuer); err != nil {
			return configErrorf("matchOIDCIdentity[%d].issuer: %v", i, err)
		}
		if _, err := regexp.Compile(id.Subject); err != nil {
			return configErrorf("matchOIDCIdentity[%d].subject: %v", i, err)
		}
	}
	return nil
}
