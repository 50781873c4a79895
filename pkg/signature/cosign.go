package signature

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/cosign/v3/pkg/cosign"
	"github.com/sigstore/cosign/v3/pkg/oci"
	ociremote "github.com/sigstore/cosign/v3/pkg/oci/remote"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tuf"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	sigsig "github.com/sigstore/sigstore/pkg/signature"
)

const (
	// bundleArtifactType prefixes the artifact type cosign v3 gives the
	// referrer manifests of its bundles
	// (application/vnd.dev.sigstore.bundle.v0.3+json).
	bundleArtifactType = "application/vnd.dev.sigstore.bundle"
	// signPredicateType is the in-toto predicate of cosign v3's image
	// signatures; other predicates are attestations (SBOMs, provenance),
	// which are not signatures of the image even by a trusted key.
	signPredicateType = "https://sigstore.dev/cosign/sign/v1"
	// bundlePredicateTypeAnnotation is the annotation cosign v3 and
	// GitHub's attest actions give a bundle referrer: its predicate type,
	// which lets a verifier skip the bundles it is not looking for
	// without reading them (what a bundle says is still checked).
	bundlePredicateTypeAnnotation = "dev.sigstore.bundle.predicateType"
)

// cosignVerifier holds a cosign config's parsed keys or keyless rules.
type cosignVerifier struct {
	// keys are the public keys by name, sorted by name.
	keys []namedKey
	// identities are the keyless rules; keyless when keys is empty.
	identities []Identity
	rootJSON   []byte
	// rules are the attestations required besides the signature.
	rules []*rule

	rootMu sync.Mutex
	root   root.TrustedMaterial
}

type namedKey struct {
	name     string
	verifier sigsig.Verifier
	// material is the key as sigstore-go's trusted material, for bundles.
	material root.TrustedMaterial
}

func newCosign(cfg Config) (*cosignVerifier, error) {
	c := &cosignVerifier{identities: cfg.Identities, rootJSON: cfg.TrustedRoot}
	for _, n := range sortedKeys(cfg.Keys) {
		pub, err := cryptoutils.UnmarshalPEMToPublicKey(cfg.Keys[n])
		if err != nil {
			return nil, configErrorf("public key %s: %v", n, err)
		}
		v, err := sigsig.LoadDefaultVerifier(pub)
		if err != nil {
			return nil, configErrorf("public key %s: %v", n, err)
		}
		ek := root.NewExpiringKey(v, time.Time{}, time.Time{})
		c.keys = append(c.keys, namedKey{name: n, verifier: v,
			material: root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) { return ek, nil })})
	}
	switch {
	case len(c.keys) == 0 && len(c.identities) == 0:
		return nil, configErrorf("cosign needs public keys (secretRef) or keyless identities (matchOIDCIdentity)")
	case len(c.keys) > 0 && len(c.identities) > 0:
		return nil, configErrorf("cosign takes public keys (secretRef) or keyless identities (matchOIDCIdentity), not both")
	}
	if err := compileIdentities(c.identities); err != nil {
		return nil, err
	}
	rules, err := compileRules(cfg.Attestations, c.identities, c.keyless())
	if err != nil {
		return nil, err
	}
	c.rules = rules
	if len(c.keys) == 0 && c.rootJSON != nil {
		// A trusted root given is checked now: a bad one is the user's
		// to fix, not a verdict on every image.
		if _, err := c.trustedRoot(); err != nil {
			return nil, &ConfigError{Err: err}
		}
	}
	return c, nil
}

// publicRootTimeout bounds fetching the public Sigstore root through TUF.
const publicRootTimeout = 30 * time.Second

// trustedRoot is the config's trusted root, or the public Sigstore one,
// fetched through its TUF repository (without a disk cache: the
// controller's file system may be read-only) and kept once fetched; a
// failed fetch is tried again by the next verification.
func (c *cosignVerifier) trustedRoot() (root.TrustedMaterial, error) {
	c.rootMu.Lock()
	defer c.rootMu.Unlock()
	if c.root != nil {
		return c.root, nil
	}
	if c.rootJSON != nil {
		tr, err := root.NewTrustedRootFromJSON(c.rootJSON)
		if err != nil {
			return nil, fmt.Errorf("trusted root: %w", err)
		}
		c.root = tr
		return tr, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), publicRootTimeout)
	defer cancel()
	tr, err := root.FetchTrustedRootWithOptions(tuf.DefaultOptions().WithContext(ctx).WithDisableLocalCache())
	if err != nil {
		return nil, fmt.Errorf("fetching the public Sigstore trusted root: %w", err)
	}
	c.root = tr
	return tr, nil
}

// requireSCT reports whether a keyless certificate must carry a signed
// certificate timestamp of a trusted CT log, as cosign verify requires by
// default: whenever the trusted root lists CT logs (the public Sigstore's
// does). A private Sigstore without a CT log has no SCT to require.
func requireSCT(tm root.TrustedMaterial) bool { return len(tm.CTLogs()) > 0 }

// keyless reports whether the config trusts identities, not keys.
func (c *cosignVerifier) keyless() bool { return len(c.keys) == 0 }

// failures collects why the signatures found did not verify.
type failures struct {
	found int
	first *hostile
	// untrusted is set once a well-formed signature failed the keys or
	// identities: the strongest "not verified" there is.
	untrusted *hostile
}

func (fs *failures) add(err *hostile) {
	fs.found++
	if fs.first == nil {
		fs.first = err
	}
	if err.reason == Untrusted && fs.untrusted == nil {
		fs.untrusted = err
	}
}

func (fs *failures) verdict(total, limit int) Verdict {
	switch {
	case fs.untrusted != nil:
		return Verdict{Reason: Untrusted, Message: fmt.Sprintf("%d signature(s) found, none trusted: %s", fs.found, fs.untrusted.msg)}
	case total > limit:
		return Verdict{Reason: TooManyReferrers, Message: fmt.Sprintf("%d signature referrers, more than the %d examined, and none of those verified", total, limit)}
	case fs.first != nil:
		return Verdict{Reason: fs.first.reason, Message: fmt.Sprintf("%d signature(s) found, none usable: %s", fs.found, fs.first.msg)}
	}
	return Verdict{Reason: NoSignature, Message: "no cosign signature (no Sigstore bundle referrer, no .sig tag)"}
}

// verify looks for a trusted bundle among the digest's referrers, then
// for a legacy .sig signature.
func (c *cosignVerifier) verify(ctx context.Context, f *fetcher) (Verdict, error) {
	v, err := c.verifySignature(ctx, f)
	if err != nil || !v.Verified || len(c.rules) == 0 {
		return v, err
	}
	return c.verifyAttestations(ctx, f, v)
}

// verifySignature looks for a trusted signature: a bundle referrer of
// cosign's signing predicate, or a legacy .sig tag.
func (c *cosignVerifier) verifySignature(ctx context.Context, f *fetcher) (Verdict, error) {
	var fs failures
	// A referrer annotated with another predicate type is an attestation:
	// it is not read as a signature.
	descs, total, err := f.referrers(bundleArtifactType, func(d v1.Descriptor) bool {
		pt, ok := d.Annotations[bundlePredicateTypeAnnotation]
		return !ok || pt == signPredicateType
	})
	if err != nil {
		return Verdict{}, err
	}
	for _, d := range descs {
		v, err := c.verifyReferrer(f, d)
		if err != nil {
			var h *hostile
			if errors.As(err, &h) {
				fs.add(h)
				continue
			}
			return Verdict{}, err
		}
		return v, nil
	}
	v, err := c.verifyLegacy(ctx, f)
	if err != nil {
		var h *hostile
		if !errors.As(err, &h) {
			return Verdict{}, err
		}
		fs.add(h)
	} else if v.Verified {
		return v, nil
	}
	return fs.verdict(total, f.limits.Referrers), nil
}

// verifyReferrer reads one bundle referrer and verifies it as the image's
// signature.
func (c *cosignVerifier) verifyReferrer(f *fetcher, d v1.Descriptor) (Verdict, error) {
	b, err := f.bundle(d)
	if err != nil {
		return Verdict{}, err
	}
	res, signer, err := c.checkBundle(b, f.ref.DigestStr(), c.identities)
	if err != nil {
		return Verdict{}, err
	}
	if err := signaturePredicate(res); err != nil {
		return Verdict{}, err
	}
	return Verdict{Verified: true, Format: "bundle", Signer: signer}, nil
}

// checkBundle verifies a Sigstore bundle over digest with the keys, or
// with the trusted root and identities, and says who signed it. For a
// DSSE bundle sigstore-go also checks that the in-toto statement's
// subjects name digest.
func (c *cosignVerifier) checkBundle(b *bundle.Bundle, digest string, identities []Identity) (res *verify.VerificationResult, signer string, err error) {
	// sigstore-go parses what the registry sent; whatever it does with
	// hostile input, it must not take the controller down.
	defer func() {
		if r := recover(); r != nil {
			err = hostilef(Malformed, "bundle could not be verified: %v", r)
		}
	}()
	alg, hexDigest, ok := strings.Cut(digest, ":")
	raw, herr := hex.DecodeString(hexDigest)
	if !ok || alg != "sha256" || herr != nil {
		return nil, "", hostilef(Malformed, "digest %q is not sha256", digest)
	}
	artifact := verify.WithArtifactDigest(alg, raw)
	var lastErr error
	if !c.keyless() {
		for _, k := range c.keys {
			sv, err := verify.NewVerifier(k.material, verify.WithNoObserverTimestamps())
			if err != nil {
				return nil, "", err
			}
			res, err := sv.Verify(b, verify.NewPolicy(artifact, verify.WithKey()))
			if err != nil {
				lastErr = err
				continue
			}
			return res, "key " + k.name, nil
		}
		return nil, "", hostilef(Untrusted, "bundle does not verify with key(s) %s: %v", c.keyNames(), lastErr)
	}
	tm, err := c.trustedRoot()
	if err != nil {
		return nil, "", err
	}
	vopts := []verify.VerifierOption{verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1)}
	if requireSCT(tm) {
		vopts = append(vopts, verify.WithSignedCertificateTimestamps(1))
	}
	sv, err := verify.NewVerifier(tm, vopts...)
	if err != nil {
		return nil, "", &ConfigError{Err: err}
	}
	opts := make([]verify.PolicyOption, 0, len(identities))
	for _, id := range identities {
		ci, err := verify.NewShortCertificateIdentity("", id.Issuer, "", id.Subject)
		if err != nil {
			return nil, "", &ConfigError{Err: err}
		}
		opts = append(opts, verify.WithCertificateIdentity(ci))
	}
	res, err = sv.Verify(b, verify.NewPolicy(artifact, opts...))
	if err != nil {
		return nil, "", hostilef(Untrusted, "bundle does not verify with the trusted root and identities: %v", err)
	}
	signer = "keyless"
	if s := res.Signature; s != nil && s.Certificate != nil {
		signer = fmt.Sprintf("subject %s issued by %s", s.Certificate.SubjectAlternativeName, s.Certificate.Issuer)
	}
	return res, signer, nil
}

// signaturePredicate refuses a DSSE bundle whose statement is an
// attestation rather than cosign's signature predicate.
func signaturePredicate(res *verify.VerificationResult) error {
	if res.Statement != nil && res.Statement.PredicateType != signPredicateType {
		return hostilef(Untrusted, "bundle is an attestation (predicate %s), not an image signature", res.Statement.PredicateType)
	}
	return nil
}

// certSigner names a Fulcio certificate's signer.
func certSigner(cert *x509.Certificate) string {
	ce := cosign.CertExtensions{Cert: cert}
	return fmt.Sprintf("subject %s issued by %s", strings.Join(cryptoutils.GetSubjectAlternateNames(cert), ","), ce.GetIssuer())
}

// signerNames says whom the config trusts, for messages.
func (c *cosignVerifier) signerNames() string {
	if c.keyless() {
		return "the trusted root and identities"
	}
	return "key(s) " + c.keyNames()
}

func (c *cosignVerifier) keyNames() string {
	names := make([]string, len(c.keys))
	for i, k := range c.keys {
		names[i] = k.name
	}
	return strings.Join(names, ", ")
}

// verifyLegacy verifies the legacy sha256-<hex>.sig tag with cosign's own
// verification (simple-signing payloads, the claim that names the
// digest), through the fetcher's capped transport.
func (c *cosignVerifier) verifyLegacy(ctx context.Context, f *fetcher) (Verdict, error) {
	co := &cosign.CheckOpts{
		RegistryClientOpts: []ociremote.Option{ociremote.WithRemoteOptions(f.opts...)},
		ClaimVerifier:      cosign.SimpleClaimVerifier,
		MaxWorkers:         1,
	}
	signer := ""
	if !c.keyless() {
		// Keyed signatures are verified offline, as cosign verify --key
		// with --insecure-ignore-tlog: the key is the trust.
		co.IgnoreTlog = true
	} else {
		tm, err := c.trustedRoot()
		if err != nil {
			return Verdict{}, err
		}
		co.TrustedMaterial = tm
		co.IgnoreSCT = !requireSCT(tm)
		for _, id := range c.identities {
			co.Identities = append(co.Identities, cosign.Identity{IssuerRegExp: id.Issuer, SubjectRegExp: id.Subject})
		}
		signer = "keyless"
	}
	var lastErr error
	tries := c.keys
	if c.keyless() {
		tries = []namedKey{{}}
	}
	for _, k := range tries {
		if k.verifier != nil {
			co.SigVerifier = k.verifier
			signer = "key " + k.name
		}
		sigs, _, err := c.legacyVerify(ctx, f, co)
		if err == nil && len(sigs) > 0 {
			if c.keyless() {
				if cert, cerr := sigs[0].Cert(); cerr == nil && cert != nil {
					signer = certSigner(cert)
				}
			}
			return Verdict{Verified: true, Format: "legacy", Signer: signer}, nil
		}
		var noSigs *cosign.ErrNoSignaturesFound
		if errors.As(err, &noSigs) {
			return Verdict{Reason: NoSignature}, nil
		}
		if err := f.classifyCosign(err); err != nil {
			return Verdict{}, err
		}
		lastErr = err
	}
	if c.keyless() {
		return Verdict{}, hostilef(Untrusted, ".sig signature does not verify with the trusted root and identities: %v", lastErr)
	}
	return Verdict{}, hostilef(Untrusted, ".sig signature does not verify with key(s) %s: %v", c.keyNames(), lastErr)
}

// legacyVerify runs cosign's verification, which must not take the
// controller down whatever the registry sent.
func (c *cosignVerifier) legacyVerify(ctx context.Context, f *fetcher, co *cosign.CheckOpts) (sigs []oci.Signature, ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = hostilef(Malformed, ".sig signature could not be verified: %v", r)
		}
	}()
	checked, bundleOK, err := cosign.VerifyImageSignatures(ctx, f.ref, co)
	return checked, bundleOK, err
}

// classifyCosign sorts an error of cosign's verification: one the
// registry could not answer stays an error (nil is returned for "the
// signature does not verify"); an oversized answer is hostile.
func (f *fetcher) classifyCosign(err error) error {
	if err == nil {
		return nil
	}
	var h *hostile
	if errors.As(err, &h) {
		return h
	}
	var tl *tooLargeError
	if errors.As(err, &tl) || f.capped.cut.Load() {
		return hostilef(TooLarge, ".sig signature is larger than %d bytes", f.capped.max)
	}
	if transient(err) {
		return fmt.Errorf(".sig signature of %s: %w", f.ref.DigestStr(), err)
	}
	return nil
}

// transient reports whether err is the registry or network failing, not
// an answer about the signature.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch {
		case terr.StatusCode >= 500, terr.StatusCode == http.StatusTooManyRequests,
			terr.StatusCode == http.StatusUnauthorized, terr.StatusCode == http.StatusForbidden:
			return true
		}
	}
	return false
}
