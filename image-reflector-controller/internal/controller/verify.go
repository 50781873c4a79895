package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/pkg/signature"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

// MaxVerifyCandidates bounds the candidates one evaluation verifies, best
// first: a repository of thousands of unsigned tags above the signed ones
// costs at most this many verifications per reconcile (each cached).
const MaxVerifyCandidates = 100

// DefaultVerifyRetry is how long a verdict that did not verify is trusted
// before a better candidate is checked again: signatures are often
// attached after the push, and the referrers API adds them without a new
// tag for a scan to notice.
const DefaultVerifyRetry = 10 * time.Minute

// VerifyMetrics count signature verifications.
type VerifyMetrics struct {
	// Verifications counts verifications by result: verified, a
	// signature.Reason, or error (the registry could not be asked).
	Verifications *prometheus.CounterVec
	// Requests counts the registry requests verifications made.
	Requests prometheus.Counter
	// Cached counts candidates answered from the verdict cache.
	Cached prometheus.Counter
	// Attestations counts attestation rules checked, by predicate type
	// and result: verified, or the reason of the rule that failed.
	Attestations *prometheus.CounterVec
}

// NewVerifyMetrics returns unregistered verification metrics.
func NewVerifyMetrics() *VerifyMetrics {
	const ns, sub = "imagetoolkit", "reflector"
	return &VerifyMetrics{
		Verifications: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "signature_verifications_total", Help: "Signature verifications of image digests by result: verified, NoSignature, Untrusted, Malformed, TooLarge, TooManyReferrers, NoAttestation, ProvenanceMismatch, error."},
			[]string{"result"}),
		Requests: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "signature_verification_requests_total", Help: "Registry requests made by signature verifications."}),
		Cached: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "signature_verdicts_cached_total", Help: "Candidates whose signature verdict came from the verdict cache."}),
		Attestations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "attestation_verifications_total", Help: "Attestations (spec.verify.attestations) of verified signatures checked, by predicate type and result: verified, or why the rule was not met (NoAttestation, ProvenanceMismatch, Untrusted, Malformed, TooLarge, TooManyReferrers)."},
			[]string{"predicate_type", "result"}),
	}
}

// Collectors returns the metrics to register.
func (m *VerifyMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Verifications, m.Requests, m.Cached, m.Attestations}
}

// verifiers keeps one signature.Verifier per key set, so a keyless
// config's trusted root is parsed (or fetched) once.
type verifiers struct {
	mu sync.Mutex
	m  map[string]*signature.Verifier
}

// maxVerifiers bounds the verifiers kept; a policy's edit makes a new one.
const maxVerifiers = 1000

func (vs *verifiers) get(cfg signature.Config) (*signature.Verifier, error) {
	id := cfg.ID()
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if v, ok := vs.m[id]; ok {
		return v, nil
	}
	v, err := signature.New(cfg, signature.Limits{})
	if err != nil {
		return nil, err
	}
	if vs.m == nil || len(vs.m) >= maxVerifiers {
		vs.m = map[string]*signature.Verifier{}
	}
	vs.m[id] = v
	return v, nil
}

// verificationConfig reads what spec.verify trusts from its Secrets and
// ConfigMap, in the policy's namespace.
func (r *ImagePolicyReconciler) verificationConfig(ctx context.Context, obj *imagev1.ImagePolicy) (signature.Config, error) {
	spec := obj.Spec.Verify
	cfg := signature.Config{Provider: signature.Provider(spec.Provider)}
	secret := func(name string) (map[string][]byte, error) {
		var s corev1.Secret
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: name}, &s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, conditions.Retryf(imagev1.InvalidVerificationReason, "spec.verify: Secret %s/%s not found", obj.Namespace, name).After(dependencyRetry)
			}
			return nil, err
		}
		return s.Data, nil
	}
	pick := func(data map[string][]byte, suffixes ...string) map[string][]byte {
		out := map[string][]byte{}
		for k, v := range data {
			for _, suf := range suffixes {
				if strings.HasSuffix(k, suf) {
					out[k] = v
				}
			}
		}
		return out
	}
	if spec.SecretRef != nil {
		data, err := secret(spec.SecretRef.Name)
		if err != nil {
			return cfg, err
		}
		if spec.Provider == imagev1.SignatureProviderNotation {
			cfg.Certificates = pick(data, ".crt", ".pem")
		} else {
			cfg.Keys = pick(data, ".pub")
			if len(cfg.Keys) == 0 {
				return cfg, conditions.Retryf(imagev1.InvalidVerificationReason, "spec.verify.secretRef: Secret %s/%s has no key ending in .pub", obj.Namespace, spec.SecretRef.Name).After(dependencyRetry)
			}
		}
	}
	for _, id := range spec.MatchOIDCIdentity {
		cfg.Identities = append(cfg.Identities, signature.Identity{Issuer: id.Issuer, Subject: id.Subject})
	}
	if ref := spec.TrustedRootSecretRef; ref != nil {
		data, err := secret(ref.Name)
		if err != nil {
			return cfg, err
		}
		root, ok := data["trusted_root.json"]
		if !ok {
			return cfg, conditions.Retryf(imagev1.InvalidVerificationReason, "spec.verify.trustedRootSecretRef: Secret %s/%s has no trusted_root.json", obj.Namespace, ref.Name).After(dependencyRetry)
		}
		cfg.TrustedRoot = root
	}
	if ref := spec.TrustPolicyRef; ref != nil {
		var cm corev1.ConfigMap
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: ref.Name}, &cm); err != nil {
			if apierrors.IsNotFound(err) {
				return cfg, conditions.Retryf(imagev1.InvalidVerificationReason, "spec.verify.trustPolicyRef: ConfigMap %s/%s not found", obj.Namespace, ref.Name).After(dependencyRetry)
			}
			return cfg, err
		}
		p, ok := cm.Data["trustpolicy.json"]
		if !ok {
			return cfg, conditions.Retryf(imagev1.InvalidVerificationReason, "spec.verify.trustPolicyRef: ConfigMap %s/%s has no trustpolicy.json", obj.Namespace, ref.Name).After(dependencyRetry)
		}
		cfg.TrustPolicy = []byte(p)
	}
	cfg.Attestations = signature.AttestationsOf(spec.Attestations)
	return cfg, nil
}

// verifySignatures (spec.verify) walks the candidates from the best down
// to the first whose digest carries a trusted signature, and makes it the
// choice, with the digest that verified. Verdicts come from the store's
// cache when it has them: verified ones for good, others for
// VerifyRetry. The better candidates that did not verify are reported in
// status.unverifiedRef and the Ready message; none verified leaves
// latestRef as it was, NoVerifiedCandidate.
func (r *ImagePolicyReconciler) verifySignatures(ctx context.Context, s *policyScope) (reconcile.Result, error) {
	obj, st := s.Obj, &s.State
	if obj.Spec.Verify == nil {
		obj.Status.Verification, obj.Status.UnverifiedRef = nil, nil
		return reconcile.Continue, nil
	}
	if st.held || st.tag == "" {
		return reconcile.Continue, nil
	}
	cfg, err := r.verificationConfig(ctx, obj)
	if err != nil {
		return reconcile.Continue, err
	}
	v, err := r.verifiers.get(cfg)
	if err != nil {
		var ce *signature.ConfigError
		if errors.As(err, &ce) {
			return reconcile.Continue, conditions.Retry(imagev1.InvalidVerificationReason, fmt.Errorf("spec.verify: %w", err)).After(dependencyRetry)
		}
		return reconcile.Continue, err
	}
	ref, err := parseImage(st.repo)
	if err != nil {
		return reconcile.Continue, err
	}
	a, err := resolveAccess(ctx, r.APIReader, st.repo, ref, nil, r.Cloud)
	if err != nil {
		return reconcile.Continue, err
	}
	if tr, ok := a.opts.Transport.(*http.Transport); ok && tr != defaultTransport {
		defer tr.CloseIdleConnections()
	}
	access := signature.Access{Auth: a.opts.Auth, Transport: a.opts.Transport, Insecure: a.opts.Insecure}
	check := func(ctx context.Context, tag string) (signature.Verdict, error) {
		digest, err := r.digest(ctx, st.repo, tag, nil)
		if err != nil {
			return signature.Verdict{}, err
		}
		return r.verdict(ctx, v, ref.Digest(digest), access, st.now, s.Requested)
	}
	walk, err := signature.FirstVerified(ctx, st.candidates, MaxVerifyCandidates, check)
	if err != nil {
		return reconcile.Continue, conditions.Retry(imagev1.DigestLookupFailedReason, err).After(dependencyRetry)
	}
	obj.Status.UnverifiedRef = nil
	if len(walk.Skipped) > 0 {
		sk := walk.Skipped[0]
		obj.Status.UnverifiedRef = &imagev1.UnverifiedRef{Tag: sk.Tag, Digest: sk.Verdict.Digest, Reason: string(sk.Verdict.Reason), Message: sk.Verdict.Message}
		// Look again once the verdicts are stale: a signature may come.
		st.requeue = minPositive(st.requeue, r.verifyRetry())
	}
	st.walk = &walk
	if walk.Tag == "" {
		return reconcile.Continue, conditions.Retryf(imagev1.NoVerifiedCandidateReason, "%s", walk.Summary()).After(r.verifyRetry())
	}
	st.tag = walk.Tag
	obj.Status.Verification = &imagev1.VerificationStatus{Digest: walk.Verdict.Digest, Signer: walk.Verdict.Signer,
		Format: walk.Verdict.Format, Skipped: len(walk.Skipped), Attestations: walk.Verdict.Attestations}
	return reconcile.Continue, nil
}

// verdict verifies digest, or answers from the store's verdict cache. A
// reconcile request (requested) checks again a digest that did not verify:
// the user who asks has usually just signed it, and should not wait for
// VerifyRetry.
func (r *ImagePolicyReconciler) verdict(ctx context.Context, v *signature.Verifier, digest name.Digest,
	access signature.Access, now time.Time, requested bool) (signature.Verdict, error) {
	cache := r.Store.Verdicts()
	if c, ok := cache.Get(v.ID(), digest.DigestStr()); ok && (c.Verified || (!requested && now.Sub(c.Checked) < r.verifyRetry())) {
		if r.VerifyMetrics != nil {
			r.VerifyMetrics.Cached.Inc()
		}
		return c.Verdict, nil
	}
	// A verdict is about the digest, not this policy: it is reached once
	// for every policy waiting on it (the flight), with its own deadline.
	key := v.ID() + "\x00" + digest.DigestStr()
	res, err, _ := r.verifyFlight.Do(key, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), signature.DefaultLimits.Timeout)
		defer cancel()
		verdict, err := v.Verify(ctx, digest, access)
		if r.VerifyMetrics != nil {
			r.VerifyMetrics.Requests.Add(float64(verdict.Requests))
			result := "verified"
			switch {
			case err != nil:
				result = "error"
			case !verdict.Verified:
				result = string(verdict.Reason)
			}
			r.VerifyMetrics.Verifications.WithLabelValues(result).Inc()
			for _, a := range verdict.Attestations {
				r.VerifyMetrics.Attestations.WithLabelValues(a.PredicateType, "verified").Inc()
			}
			if err == nil && verdict.FailedAttestation != "" {
				r.VerifyMetrics.Attestations.WithLabelValues(verdict.FailedAttestation, string(verdict.Reason)).Inc()
			}
		}
		if err != nil {
			return nil, err
		}
		if err := cache.Put(v.ID(), verdict, now); err != nil {
			// The verdict stands; after a restart it is reached again.
			ctrl.LoggerFrom(ctx).Error(err, "storing a signature verdict", "digest", verdict.Digest)
		}
		return verdict, nil
	})
	if err != nil {
		return signature.Verdict{}, err
	}
	return res.(signature.Verdict), nil
}

func (r *ImagePolicyReconciler) verifyRetry() time.Duration {
	if r.VerifyRetry > 0 {
		return r.VerifyRetry
	}
	return DefaultVerifyRetry
}
