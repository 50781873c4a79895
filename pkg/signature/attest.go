package signature

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/cosign/v3/pkg/cosign"
	"github.com/sigstore/cosign/v3/pkg/oci"
	ociremote "github.com/sigstore/cosign/v3/pkg/oci/remote"
	"google.golang.org/protobuf/encoding/protojson"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Attestation is a rule of Config.Attestations: an in-toto attestation a
// digest must carry besides its signature, who must have signed it, and
// what it must say.
type Attestation struct {
	// Name names the rule in verdicts and messages.
	Name string
	// PredicateType is a predicate type URI or one of cosign attest's
	// --type names (PredicateTypeURI).
	PredicateType string
	// Identities are the keyless signers of this attestation; empty
	// means the Config's. Keyed configs trust their keys for both.
	Identities []Identity
	// SLSA are conditions on an SLSA provenance.
	SLSA SLSAMatch
	// Conditions are CEL expressions over the statement, each must be
	// true (conditions.go).
	Conditions []string
}

// SLSAMatch is what an SLSA provenance must say: each value a glob
// (path.Match) or, starting with ^, a regular expression; empty matches
// anything. SourceRepository is matched against the repository without
// scheme, user and .git (github.com/acme/api).
type SLSAMatch struct {
	BuilderID, SourceRepository, SourceRef, BuildType string
}

func (m SLSAMatch) isZero() bool { return m == SLSAMatch{} }

// AttestationsOf are the rules of spec.verify.attestations, for the
// reflector and tk-image policy eval alike.
func AttestationsOf(spec []imagev1.AttestationRule) []Attestation {
	var out []Attestation
	for _, a := range spec {
		rule := Attestation{Name: a.Name, PredicateType: a.PredicateType, Conditions: a.Conditions}
		for _, id := range a.MatchOIDCIdentity {
			rule.Identities = append(rule.Identities, Identity{Issuer: id.Issuer, Subject: id.Subject})
		}
		if m := a.SLSA; m != nil {
			rule.SLSA = SLSAMatch{BuilderID: m.BuilderID, SourceRepository: m.SourceRepository, SourceRef: m.SourceRef, BuildType: m.BuildType}
		}
		out = append(out, rule)
	}
	return out
}

const (
	// SLSAProvenanceV1 and SLSAProvenanceV02 are the SLSA provenance
	// predicate types.
	SLSAProvenanceV1  = "https://slsa.dev/provenance/v1"
	SLSAProvenanceV02 = "https://slsa.dev/provenance/v0.2"
)

// predicateTypes are cosign attest's --type names and the predicate type
// each writes (cosign's options.PredicateTypeMap), so that a policy can
// say what the signer's command said.
var predicateTypes = map[string]string{
	"custom":           "https://cosign.sigstore.dev/attestation/v1",
	"slsaprovenance":   SLSAProvenanceV02,
	"slsaprovenance02": SLSAProvenanceV02,
	"slsaprovenance1":  SLSAProvenanceV1,
	"spdx":             "https://spdx.dev/Document",
	"spdxjson":         "https://spdx.dev/Document",
	"cyclonedx":        "https://cyclonedx.org/bom",
	"link":             "https://in-toto.io/Link/v1",
	"vuln":             "https://cosign.sigstore.dev/attestation/vuln/v1",
	"openvex":          "https://openvex.dev/ns",
}

// PredicateTypeURI is the predicate type a rule names: a cosign --type
// name's URI, or the URI itself.
func PredicateTypeURI(t string) (string, error) {
	if uri, ok := predicateTypes[t]; ok {
		return uri, nil
	}
	if scheme, rest, ok := strings.Cut(t, "://"); ok && scheme != "" && rest != "" && !strings.ContainsAny(t, " \t\n") {
		return t, nil
	}
	names := make([]string, 0, len(predicateTypes))
	for n := range predicateTypes {
		names = append(names, n)
	}
	slices.Sort(names)
	return "", fmt.Errorf("predicate type %q is neither a URI nor one of cosign's names (%s)", t, strings.Join(names, ", "))
}

// rule is an Attestation made ready: its URI, signers, matchers and
// compiled conditions.
type rule struct {
	Attestation
	uri        string
	identities []Identity
	builder    matcher
	repo       matcher
	ref        matcher
	buildType  matcher
	conditions []condition
}

func (r *rule) slsa() bool { return r.uri == SLSAProvenanceV1 || r.uri == SLSAProvenanceV02 }

func compileRules(atts []Attestation, identities []Identity, keyless bool) ([]*rule, error) {
	var rules []*rule
	seen := map[string]bool{}
	for i, a := range atts {
		where := fmt.Sprintf("attestations[%d]", i)
		if a.Name == "" {
			return nil, configErrorf("%s: a name is required", where)
		}
		if seen[a.Name] {
			return nil, configErrorf("%s: the name %q is used twice", where, a.Name)
		}
		seen[a.Name] = true
		uri, err := PredicateTypeURI(a.PredicateType)
		if err != nil {
			return nil, configErrorf("%s.predicateType: %v", where, err)
		}
		r := &rule{Attestation: a, uri: uri, identities: identities}
		if len(a.Identities) > 0 {
			if !keyless {
				return nil, configErrorf("%s.matchOIDCIdentity: keyless signers need keyless verification (matchOIDCIdentity, not secretRef)", where)
			}
			if err := compileIdentities(a.Identities); err != nil {
				return nil, configErrorf("%s.%v", where, err)
			}
			r.identities = a.Identities
		}
		if !a.SLSA.isZero() && !r.slsa() {
			return nil, configErrorf("%s.slsa: conditions on SLSA provenance need an SLSA provenance predicate type, not %s", where, uri)
		}
		for _, m := range []struct {
			field string
			into  *matcher
			value string
		}{{"builderID", &r.builder, a.SLSA.BuilderID}, {"sourceRepository", &r.repo, normalizeRepo(a.SLSA.SourceRepository)},
			{"sourceRef", &r.ref, a.SLSA.SourceRef}, {"buildType", &r.buildType, a.SLSA.BuildType}} {
			if *m.into, err = compileMatcher(m.value); err != nil {
				return nil, configErrorf("%s.slsa.%s: %v", where, m.field, err)
			}
		}
		for j, expr := range a.Conditions {
			c, err := compileCondition(expr)
			if err != nil {
				return nil, configErrorf("%s.conditions[%d]: %v", where, j, err)
			}
			r.conditions = append(r.conditions, c)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// matcher matches a whole value: a glob, or a regular expression when it
// starts with ^; the empty matcher matches anything.
type matcher struct {
	pattern string
	re      *regexp.Regexp
}

func compileMatcher(pattern string) (matcher, error) {
	m := matcher{pattern: pattern}
	if strings.HasPrefix(pattern, "^") {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return m, err
		}
		m.re = re
		return m, nil
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return m, fmt.Errorf("glob %q: %v", pattern, err)
	}
	return m, nil
}

func (m matcher) match(s string) bool {
	switch {
	case m.pattern == "":
		return true
	case m.re != nil:
		return m.re.MatchString(s)
	}
	ok, _ := path.Match(m.pattern, s)
	return ok
}

// normalizeRepo is a source repository as rules name it: no git+ prefix,
// scheme, user, trailing / or .git, and a lower-case host
// (git+https://github.com/Acme/api.git is github.com/Acme/api).
func normalizeRepo(s string) string {
	if strings.HasPrefix(s, "^") {
		return s // a regular expression is the user's own
	}
	s = strings.TrimPrefix(strings.TrimSpace(s), "git+")
	if _, rest, ok := strings.Cut(s, "://"); ok {
		s = rest
	}
	host, rest, _ := strings.Cut(s, "/")
	if _, h, ok := strings.Cut(host, "@"); ok {
		host = h
	}
	// scp-like git@host:org/repo
	if h, p, ok := strings.Cut(host, ":"); ok && rest == "" {
		host, rest = h, p
	}
	s = strings.ToLower(host)
	if rest != "" {
		s += "/" + rest
	}
	s = strings.TrimSuffix(strings.TrimSuffix(s, "/"), ".git")
	return s
}

// statement is an in-toto statement that verified for the digest, as
// rules and conditions read it.
type statement struct {
	predicateType string
	predicate     map[string]any
	subject       []any
	signer        string
	format        string
	// identities are the keyless identities its signature verified with
	// (nil for keys): a rule takes only what its own signers signed.
	identities []Identity
}

func statementOf(s *intoto.Statement, signer, format string, ids []Identity) statement {
	st := statement{predicateType: s.GetPredicateType(), signer: signer, format: format, identities: ids, predicate: map[string]any{}}
	if p := s.GetPredicate(); p != nil {
		st.predicate = p.AsMap()
	}
	for _, sub := range s.GetSubject() {
		digests := map[string]any{}
		for k, v := range sub.GetDigest() {
			digests[k] = v
		}
		st.subject = append(st.subject, map[string]any{"name": sub.GetName(), "digest": digests})
	}
	return st
}

// check reports whether st meets r, and what it says of the build; a
// mismatch is ProvenanceMismatch, naming the field and the values.
func (r *rule) check(ctx context.Context, st statement) (meta.Attestation, error) {
	a := meta.Attestation{Name: r.Name, PredicateType: st.predicateType, Signer: st.signer, Format: st.format}
	if r.slsa() {
		p := provenanceOf(st.predicateType, st.predicate)
		a.Builder, a.BuildType, a.SourceRepository, a.SourceRef, a.Revision = p.builder, p.buildType, p.repo, p.ref, p.revision
		for _, f := range []struct {
			what  string
			m     matcher
			value string
		}{{"builder id", r.builder, p.builder}, {"source repository", r.repo, p.repo}, {"source ref", r.ref, p.ref}, {"build type", r.buildType, p.buildType}} {
			if f.m.match(f.value) {
				continue
			}
			if f.value == "" {
				return a, hostilef(ProvenanceMismatch, "the provenance names no %s; %s must match %s", f.what, f.what, f.m.pattern)
			}
			return a, hostilef(ProvenanceMismatch, "%s %s does not match %s", f.what, clip(f.value), f.m.pattern)
		}
	}
	for _, c := range r.conditions {
		if err := c.holds(ctx, st); err != nil {
			return a, hostilef(ProvenanceMismatch, "%v", err)
		}
	}
	return a, nil
}

// clip bounds a value from a registry in messages.
func clip(s string) string {
	const max = 200
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// provenance is what an SLSA provenance says of the build.
type provenance struct{ builder, buildType, repo, ref, revision string }

// provenanceOf reads an SLSA provenance, v1 or v0.2: the builder, the
// build type, and the source (repository, ref, commit) the way GitHub's
// and GitLab's builders and cosign's generators write it.
func provenanceOf(uri string, p map[string]any) provenance {
	var out provenance
	var deps []any
	if uri == SLSAProvenanceV1 {
		out.builder = str(p, "runDetails", "builder", "id")
		out.buildType = str(p, "buildDefinition", "buildType")
		out.repo = str(p, "buildDefinition", "externalParameters", "workflow", "repository")
		out.ref = str(p, "buildDefinition", "externalParameters", "workflow", "ref")
		deps, _ = get(p, "buildDefinition", "resolvedDependencies").([]any)
	} else {
		out.builder = str(p, "builder", "id")
		out.buildType = str(p, "buildType")
		if cs, ok := get(p, "invocation", "configSource").(map[string]any); ok {
			deps = append(deps, cs)
		}
		if m, ok := get(p, "materials").([]any); ok {
			deps = append(deps, m...)
		}
	}
	// The source is the first git dependency: its URI names the
	// repository and the ref (git+https://host/org/repo@refs/heads/main),
	// its digest the commit.
	for _, d := range deps {
		dm, ok := d.(map[string]any)
		if !ok {
			continue
		}
		u, _ := dm["uri"].(string)
		commit := str(dm, "digest", "gitCommit")
		if commit == "" {
			commit = str(dm, "digest", "sha1")
		}
		if !strings.HasPrefix(u, "git+") && commit == "" {
			continue
		}
		repo, ref := splitGitURI(u)
		if out.repo == "" {
			out.repo = repo
		}
		if out.ref == "" {
			out.ref = ref
		}
		out.revision = commit
		break
	}
	out.repo = normalizeRepo(out.repo)
	return out
}

// splitGitURI splits git+https://host/org/repo@refs/heads/main into the
// repository and the ref.
func splitGitURI(u string) (repo, ref string) {
	if i := strings.LastIndex(u, "@"); i > 0 {
		after := u[i+1:]
		before := u[:i]
		// The @ of a user (ssh://git@host/...) comes before the path.
		if strings.HasPrefix(after, "refs/") || (strings.Contains(before[strings.Index(before, "://")+1:], "/") && !strings.Contains(after, "/")) {
			return before, after
		}
	}
	return u, ""
}

func get(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func str(m map[string]any, keys ...string) string {
	s, _ := get(m, keys...).(string)
	return s
}

// failures of one rule: why none of the attestations found met it, the
// strongest reason first (a signed attestation saying the wrong thing is
// the one the user must hear of).
type ruleFailures struct {
	found    []string
	mismatch *hostile
	other    *hostile
}

func (rf *ruleFailures) add(h *hostile) {
	switch {
	case h.reason == ProvenanceMismatch:
		if rf.mismatch == nil {
			rf.mismatch = h
		}
	case rf.other == nil || (h.reason == Untrusted && rf.other.reason != Untrusted):
		rf.other = h
	}
}

func (rf *ruleFailures) verdict(r *rule) Verdict {
	name := fmt.Sprintf("attestation %s (%s)", r.Name, r.uri)
	switch {
	case rf.mismatch != nil:
		return Verdict{Reason: ProvenanceMismatch, Message: name + ": " + rf.mismatch.msg, FailedAttestation: r.uri}
	case rf.other != nil:
		return Verdict{Reason: rf.other.reason, Message: name + ": " + rf.other.msg, FailedAttestation: r.uri}
	}
	msg := name + ": none found (no Sigstore bundle referrer or .att tag of that predicate type)"
	if len(rf.found) > 0 {
		slices.Sort(rf.found)
		msg += "; found " + strings.Join(slices.Compact(rf.found), ", ")
	}
	return Verdict{Reason: NoAttestation, Message: msg, FailedAttestation: r.uri}
}

// verifyAttestations checks every rule for the digest whose signature
// verified; the first rule not met is the verdict. Bundle referrers are
// read first (their list is the signature check's), then the legacy .att
// tag, read once for all rules.
func (c *cosignVerifier) verifyAttestations(ctx context.Context, f *fetcher, signed Verdict) (Verdict, error) {
	var legacy *legacyRead
	for _, r := range c.rules {
		var rf ruleFailures
		a, ok, err := c.bundleAttestation(ctx, f, r, &rf)
		if err != nil {
			return Verdict{}, err
		}
		if !ok {
			if legacy == nil {
				if legacy, err = c.legacyAttestations(ctx, f); err != nil {
					return Verdict{}, err
				}
			}
			// The tag's failures are every rule's that reads it, not
			// only the first's: each hears of those of its type.
			legacy.failuresFor(r, &rf)
			a, ok = r.first(ctx, legacy.statements, &rf)
		}
		if !ok {
			return rf.verdict(r), nil
		}
		signed.Attestations = append(signed.Attestations, a)
	}
	return signed, nil
}

// first is the first statement of r's predicate type that meets it.
func (r *rule) first(ctx context.Context, sts []statement, rf *ruleFailures) (meta.Attestation, bool) {
	for _, st := range sts {
		if st.predicateType != r.uri {
			if st.predicateType != signPredicateType {
				rf.found = append(rf.found, clip(st.predicateType))
			}
			continue
		}
		if st.identities != nil && !slices.Equal(st.identities, r.identities) {
			rf.add(&hostile{reason: Untrusted, msg: fmt.Sprintf("signed by %s, not by the attestation's signers", st.signer)})
			continue
		}
		a, err := r.check(ctx, st)
		if err != nil {
			var h *hostile
			if errors.As(err, &h) {
				rf.add(h)
			}
			continue
		}
		return a, true
	}
	return meta.Attestation{}, false
}

// bundleAttestation looks for an attestation meeting r among the
// digest's Sigstore bundle referrers. A referrer whose annotation names
// another predicate type is not read.
func (c *cosignVerifier) bundleAttestation(ctx context.Context, f *fetcher, r *rule, rf *ruleFailures) (meta.Attestation, bool, error) {
	descs, total, err := f.referrers(bundleArtifactType, func(d v1.Descriptor) bool {
		pt, ok := d.Annotations[bundlePredicateTypeAnnotation]
		if ok && pt != r.uri && pt != signPredicateType {
			rf.found = append(rf.found, clip(pt))
		}
		return !ok || pt == r.uri
	})
	if err != nil {
		return meta.Attestation{}, false, err
	}
	if total > len(descs) {
		rf.add(&hostile{reason: TooManyReferrers, msg: fmt.Sprintf("%d bundle referrers of that type, more than the %d examined", total, len(descs))})
	}
	for _, d := range descs {
		b, err := f.bundle(d)
		if err != nil {
			var h *hostile
			if errors.As(err, &h) {
				rf.add(h)
				continue
			}
			return meta.Attestation{}, false, err
		}
		res, signer, err := c.checkBundle(b, f.ref.DigestStr(), r.identities)
		if err != nil {
			var h *hostile
			if errors.As(err, &h) {
				rf.add(h)
				continue
			}
			return meta.Attestation{}, false, err
		}
		if res.Statement == nil {
			continue // a message signature, not an attestation
		}
		a, ok := r.first(ctx, []statement{statementOf(res.Statement, signer, "bundle", nil)}, rf)
		if ok {
			return a, true, nil
		}
	}
	return meta.Attestation{}, false, nil
}

// legacyRead is what the sha256-<hex>.att tag held: the statements that
// verified, and why the others did not.
type legacyRead struct {
	statements []statement
	failures   []legacyFailure
}

// legacyFailure is a failure of the .att tag, or of one of its layers
// claiming predicateType ("" when the failure is the whole tag's or the
// layer claims none).
type legacyFailure struct {
	predicateType string
	h             *hostile
}

func (l *legacyRead) fail(predicateType string, reason Reason, format string, args ...any) {
	l.failures = append(l.failures, legacyFailure{predicateType, &hostile{reason: reason, msg: fmt.Sprintf(format, args...)}})
}

// failuresFor adds to rf the failures r must hear of: the tag's own, and
// those of the layers claiming r's predicate type.
func (l *legacyRead) failuresFor(r *rule, rf *ruleFailures) {
	for _, lf := range l.failures {
		if lf.predicateType == "" || lf.predicateType == r.uri {
			rf.add(lf.h)
		}
	}
}

// legacyAttestations reads the sha256-<hex>.att tag once and returns the
// statements whose DSSE signature cosign verifies with the config's keys
// or identities (and whose in-toto subject names the digest).
func (c *cosignVerifier) legacyAttestations(ctx context.Context, f *fetcher) (l *legacyRead, err error) {
	l = &legacyRead{}
	defer func() {
		if r := recover(); r != nil {
			l = &legacyRead{}
			l.fail("", Malformed, ".att attestations could not be verified: %v", r)
			err = nil
		}
	}()
	opts := []ociremote.Option{ociremote.WithRemoteOptions(f.opts...)}
	tag, err := ociremote.AttestationTag(f.ref, opts...)
	if err != nil {
		return nil, fmt.Errorf(".att tag of %s: %w", f.ref.DigestStr(), err)
	}
	atts, err := ociremote.Signatures(tag, opts...)
	if err != nil {
		if cerr := f.classifyCosign(err); cerr != nil {
			return nil, cerr
		}
		l.fail("", Malformed, ".att tag: %v", err)
		return l, nil
	}
	list, err := atts.Get()
	if err != nil {
		if cerr := f.classifyCosign(err); cerr != nil {
			return nil, cerr
		}
		l.fail("", Malformed, ".att tag: %v", err)
		return l, nil
	}
	if len(list) == 0 {
		return l, nil
	}
	if len(list) > f.limits.Referrers {
		// Each layer is a payload to fetch and a signature to check: a
		// hostile tag of thousands would cost a request each.
		l.fail("", TooManyReferrers, ".att tag holds %d attestations, more than the %d examined", len(list), f.limits.Referrers)
		return l, nil
	}
	h, err := v1.NewHash(f.ref.DigestStr())
	if err != nil {
		return nil, err
	}
	type attempt struct {
		co     *cosign.CheckOpts
		signer string
		ids    []Identity
	}
	var attempts []attempt
	base := func() *cosign.CheckOpts {
		return &cosign.CheckOpts{RegistryClientOpts: opts, ClaimVerifier: cosign.IntotoSubjectClaimVerifier, MaxWorkers: 1}
	}
	if !c.keyless() {
		for _, k := range c.keys {
			co := base()
			co.IgnoreTlog, co.SigVerifier = true, k.verifier
			attempts = append(attempts, attempt{co, "key " + k.name, nil})
		}
	} else {
		tm, err := c.trustedRoot()
		if err != nil {
			return nil, err
		}
		// Every rule's identities: which rule an attestation may meet is
		// decided by its signer below.
		for _, ids := range c.ruleIdentities() {
			co := base()
			co.TrustedMaterial, co.IgnoreSCT = tm, !requireSCT(tm)
			for _, id := range ids {
				co.Identities = append(co.Identities, cosign.Identity{IssuerRegExp: id.Issuer, SubjectRegExp: id.Subject})
			}
			attempts = append(attempts, attempt{co, "keyless", ids})
		}
	}
	verified := map[v1.Hash]bool{}
	var lastErr error
	for _, at := range attempts {
		checked, _, err := cosign.VerifyImageAttestation(ctx, atts, h, at.co)
		if err != nil {
			var none *cosign.ErrNoMatchingAttestations
			if !errors.As(err, &none) {
				if cerr := f.classifyCosign(err); cerr != nil {
					return nil, cerr
				}
			}
			lastErr = err
			continue
		}
		for _, att := range checked {
			if d, err := att.Digest(); err == nil {
				verified[d] = true
			}
			st, err := legacyStatement(att.Payload)
			if err != nil {
				l.fail("", Malformed, "%v", err)
				continue
			}
			signer := at.signer
			if c.keyless() {
				if cert, cerr := att.Cert(); cerr == nil && cert != nil {
					signer = certSigner(cert)
				}
			}
			l.statements = append(l.statements, statementOf(st, signer, "legacy", at.ids))
		}
	}
	// cosign returns the layers that verified and drops the others
	// silently once one does: a layer of the rule's type that none of the
	// signers verified must still be heard of as Untrusted (the real
	// cosign attest appends every attestation to the one .att manifest,
	// so another key's provenance sits beside the trusted key's scan),
	// not as no attestation at all. The type it claims is unverified; it
	// only says which rule the failure concerns.
	for _, att := range list {
		if d, err := att.Digest(); err == nil && verified[d] {
			continue
		}
		pt := claimedPredicateType(att)
		msg := fmt.Sprintf(".att attestation does not verify with %s", c.signerNames())
		if lastErr != nil {
			msg += ": " + clipErr(lastErr)
		}
		l.fail(pt, Untrusted, "%s", msg)
	}
	return l, nil
}

// claimedPredicateType is the predicate type an unverified .att layer
// claims: its predicateType annotation, as cosign attest writes it, or
// its statement's.
func claimedPredicateType(att oci.Signature) string {
	if ann, err := att.Annotations(); err == nil && ann["predicateType"] != "" {
		return ann["predicateType"]
	}
	if st, err := legacyStatement(att.Payload); err == nil {
		return st.GetPredicateType()
	}
	return ""
}

func clipErr(err error) string { return clip(err.Error()) }

// legacyStatement is the in-toto statement inside a cosign .att layer's
// DSSE envelope.
func legacyStatement(payload func() ([]byte, error)) (*intoto.Statement, error) {
	b, err := payload()
	if err != nil {
		return nil, fmt.Errorf(".att payload: %v", err)
	}
	var env dsse.Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf(".att payload is not a DSSE envelope: %v", err)
	}
	body, err := env.DecodeB64Payload()
	if err != nil {
		return nil, fmt.Errorf(".att envelope: %v", err)
	}
	var st intoto.Statement
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf(".att envelope is not an in-toto statement: %v", err)
	}
	return &st, nil
}

// ruleIdentities are the distinct keyless identity sets of the rules.
func (c *cosignVerifier) ruleIdentities() [][]Identity {
	var out [][]Identity
	for _, r := range c.rules {
		if !slices.ContainsFunc(out, func(ids []Identity) bool { return slices.Equal(ids, r.identities) }) {
			out = append(out, r.identities)
		}
	}
	return out
}
