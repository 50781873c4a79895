package signature

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/notaryproject/notation-go"
	"github.com/notaryproject/notation-go/verifier"
	"github.com/notaryproject/notation-go/verifier/trustpolicy"
	"github.com/notaryproject/notation-go/verifier/truststore"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

const (
	// notationArtifactType is the artifact type of Notation's signature
	// manifests.
	notationArtifactType = "application/vnd.cncf.notary.signature"
	// notation's envelope media types, the signature manifest's layer.
	joseMediaType = "application/jose+json"
	coseMediaType = "application/cose"
)

// notationVerifier holds a Notation trust policy and trust store.
type notationVerifier struct {
	verifier notation.Verifier
}

func newNotation(cfg Config) (*notationVerifier, error) {
	if len(cfg.Keys) > 0 || len(cfg.Identities) > 0 {
		return nil, configErrorf("notation takes a trust policy and certificates, not cosign keys or identities")
	}
	if len(cfg.TrustPolicy) == 0 {
		return nil, configErrorf("notation needs a trust policy (trustpolicy.json)")
	}
	var doc trustpolicy.Document
	if err := json.Unmarshal(cfg.TrustPolicy, &doc); err != nil {
		return nil, configErrorf("trust policy: %v", err)
	}
	store, err := newTrustStore(cfg.Certificates)
	if err != nil {
		return nil, err
	}
	v, err := verifier.NewWithOptions(&doc, store, nil, verifier.VerifierOptions{})
	if err != nil {
		return nil, configErrorf("trust policy: %v", err)
	}
	return &notationVerifier{verifier: v}, nil
}

// trustStore is a Notation trust store held in memory: every certificate
// of the Secret (each key a PEM bundle or one DER certificate) is in every
// named store of every type, as the trust policy's "ca:NAME",
// "signingAuthority:NAME" and "tsa:NAME" name them. Which certificates a
// policy trusts is which Secret it names, not which store.
type trustStore struct {
	certs []*x509.Certificate
}

func newTrustStore(files map[string][]byte) (*trustStore, error) {
	s := &trustStore{}
	for _, name := range sortedKeys(files) {
		b := files[name]
		n := 0
		for {
			var block *pem.Block
			block, b = pem.Decode(b)
			if block == nil {
				break
			}
			if block.Type != "CERTIFICATE" {
				continue
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, configErrorf("certificate %s: %v", name, err)
			}
			s.certs = append(s.certs, c)
			n++
		}
		if n == 0 {
			c, err := x509.ParseCertificate(files[name])
			if err != nil {
				return nil, configErrorf("%s holds no PEM or DER certificate", name)
			}
			s.certs = append(s.certs, c)
		}
	}
	if len(s.certs) == 0 {
		return nil, configErrorf("notation needs at least one trusted certificate")
	}
	return s, nil
}

func (s *trustStore) GetCertificates(_ context.Context, _ truststore.Type, _ string) ([]*x509.Certificate, error) {
	return s.certs, nil
}

func (n *notationVerifier) verify(ctx context.Context, f *fetcher) (v Verdict, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = Verdict{}, hostilef(Malformed, "notation signature could not be verified: %v", r)
		}
	}()
	repo := &notationRepo{f: f}
	_, outcomes, err := notation.Verify(ctx, n.verifier, repo, notation.VerifyOptions{
		ArtifactReference:    f.ref.String(),
		MaxSignatureAttempts: f.limits.Referrers,
	})
	if repo.err != nil {
		// The registry failed, or answered with something oversized or
		// malformed, while listing: notation's own error says less.
		return Verdict{}, repo.err
	}
	if err == nil {
		if len(outcomes) == 0 {
			return Verdict{}, hostilef(Untrusted, "notation verified no signature")
		}
		o := outcomes[0]
		if o.VerificationLevel == nil || o.VerificationLevel.Name == trustpolicy.LevelSkip.Name {
			return Verdict{Reason: Untrusted, Message: "the trust policy skips verification for this image: nothing was verified"}, nil
		}
		signer := "notation"
		if o.EnvelopeContent != nil && len(o.EnvelopeContent.SignerInfo.CertificateChain) > 0 {
			signer = "certificate " + o.EnvelopeContent.SignerInfo.CertificateChain[0].Subject.String()
		}
		return Verdict{Verified: true, Format: "notation", Signer: signer}, nil
	}
	var fs failures
	for _, h := range repo.skipped {
		fs.add(h)
	}
	var retrieval notation.ErrorSignatureRetrievalFailed
	if errors.As(err, &retrieval) && len(repo.skipped) == 0 && repo.listed == 0 {
		return Verdict{Reason: NoSignature, Message: "no Notation signature referrer"}, nil
	}
	if repo.listed > 0 {
		fs.add(&hostile{reason: Untrusted, msg: oneLine(err.Error())})
	}
	return fs.verdict(repo.total, f.limits.Referrers), nil
}

// oneLine joins a multi-line error (errors.Join) for a status message.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// notationRepo is the read-only registry.Repository notation-go verifies
// through: the fetcher's capped reads. It fetches each signature
// referrer whole while listing, so that one oversized or malformed
// referrer is skipped (and reported) rather than aborting the
// verification of the others, as an error of FetchSignatureBlob would.
type notationRepo struct {
	f *fetcher
	// blobs are the envelopes of the listed signature manifests.
	blobs map[string]notationBlob
	// skipped are the referrers that could not be used.
	skipped []*hostile
	// listed and total count the usable signatures handed to notation
	// and all signature referrers.
	listed, total int
	// err is a registry failure or hostile answer outside a referrer.
	err error
}

type notationBlob struct {
	body []byte
	desc ocispec.Descriptor
}

func (r *notationRepo) Resolve(_ context.Context, reference string) (ocispec.Descriptor, error) {
	if reference != r.f.ref.DigestStr() {
		return ocispec.Descriptor{}, fmt.Errorf("only %s is resolved here, not %s", r.f.ref.DigestStr(), reference)
	}
	d, err := remote.Head(r.f.ref, r.f.opts...)
	if err != nil {
		r.err = r.f.classify("manifest "+r.f.ref.DigestStr(), err)
		return ocispec.Descriptor{}, r.err
	}
	if d.Digest.String() != r.f.ref.DigestStr() {
		r.err = hostilef(Malformed, "the registry answers %s for %s", d.Digest, r.f.ref.DigestStr())
		return ocispec.Descriptor{}, r.err
	}
	return ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size}, nil
}

func (r *notationRepo) ListSignatures(_ context.Context, _ ocispec.Descriptor, fn func([]ocispec.Descriptor) error) error {
	descs, total, err := r.f.referrers(notationArtifactType, nil)
	if err != nil {
		r.err = err
		return err
	}
	r.total = total
	r.blobs = map[string]notationBlob{}
	var usable []ocispec.Descriptor
	for _, d := range descs {
		b, err := r.read(d)
		if err != nil {
			var h *hostile
			if !errors.As(err, &h) {
				r.err = err
				return err
			}
			r.skipped = append(r.skipped, h)
			continue
		}
		r.blobs[d.Digest.String()] = b
		usable = append(usable, ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size, ArtifactType: d.ArtifactType})
	}
	r.listed = len(usable)
	if len(usable) == 0 {
		return nil
	}
	return fn(usable)
}

// read fetches a signature manifest and its envelope.
func (r *notationRepo) read(d v1.Descriptor) (notationBlob, error) {
	m, err := r.f.manifest(d)
	if err != nil {
		return notationBlob{}, err
	}
	if len(m.Layers) != 1 {
		return notationBlob{}, hostilef(Malformed, "notation signature %s has %d layers, not 1", d.Digest, len(m.Layers))
	}
	l := m.Layers[0]
	if mt := string(l.MediaType); mt != joseMediaType && mt != coseMediaType {
		return notationBlob{}, hostilef(Malformed, "notation signature %s has an envelope of media type %q", d.Digest, mt)
	}
	body, err := r.f.blob(l)
	if err != nil {
		return notationBlob{}, err
	}
	return notationBlob{body: body, desc: ocispec.Descriptor{MediaType: string(l.MediaType), Digest: digest.Digest(l.Digest.String()), Size: l.Size}}, nil
}

func (r *notationRepo) FetchSignatureBlob(_ context.Context, desc ocispec.Descriptor) ([]byte, ocispec.Descriptor, error) {
	b, ok := r.blobs[desc.Digest.String()]
	if !ok {
		return nil, ocispec.Descriptor{}, fmt.Errorf("signature %s was not listed", desc.Digest)
	}
	return b.body, b.desc, nil
}

func (r *notationRepo) PushSignature(context.Context, string, []byte, ocispec.Descriptor, map[string]string) (ocispec.Descriptor, ocispec.Descriptor, error) {
	return ocispec.Descriptor{}, ocispec.Descriptor{}, errors.New("verification does not push")
}
