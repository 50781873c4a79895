package migrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/commitmsg"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/policy"
)

// fluxObject is one Flux object being converted: it names the object in
// messages and collects the warnings and the problems that stop it.
type fluxObject struct {
	kind, version   string
	name, namespace string
	label           string // "ImagePolicy apps/podinfo"
	warnings        []string
	problems        []string
}

func (c *fluxObject) warnf(field, format string, args ...any) {
	c.warnings = append(c.warnings, field+": "+fmt.Sprintf(format, args...))
}

func (c *fluxObject) failf(field, format string, args ...any) {
	c.problems = append(c.problems, field+": "+fmt.Sprintf(format, args...))
}

// checked reports the values of the wrong type decoding found in an object.
func (c *fluxObject) checked(f *fields) {
	c.problems = append(c.problems, f.problems...)
}

// done reports what decoding found wrong in an object the converter has
// read: values of the wrong type, and keys image-toolkit lacks, which are
// dropped.
func (c *fluxObject) done(f *fields) {
	c.checked(f)
	for _, k := range f.unknown {
		c.warnf(at(f.path, k), "image-toolkit's %s has no such field; dropped", c.kind)
	}
}

// Patterns of the durations our CRDs accept (the same as Flux's v1 CRDs);
// Flux's v1beta1 CRDs had no pattern.
var (
	migrateIntervalRE = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`)
	migrateTimeoutRE  = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ms|s|m))+$`)
	migrateCommitRE   = regexp.MustCompile(`^[0-9a-f]{7,64}$`)
)

// duration copies a duration, rewriting one Go accepts but the CRD's
// pattern does not (e.g. a v1beta1 timeout of 1h) into a form it does.
func (c *fluxObject) duration(field, s, key string, out map[string]any, required bool, pattern *regexp.Regexp) {
	if s == "" {
		if required {
			c.failf(field, "is required")
		}
		return
	}
	if pattern.MatchString(s) {
		out[key] = s
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		c.failf(field, "%q is not a duration such as 30s, 5m or 1h", s)
		return
	}
	rewritten := ""
	switch hours := pattern == migrateIntervalRE; {
	case hours && d%time.Hour == 0:
		rewritten = fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		rewritten = fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		rewritten = fmt.Sprintf("%ds", d/time.Second)
	case d%time.Millisecond == 0:
		rewritten = fmt.Sprintf("%dms", d/time.Millisecond)
	}
	if rewritten == "" || !pattern.MatchString(rewritten) {
		c.failf(field, "%q cannot be written in the form image-toolkit accepts (%s)", s, pattern)
		return
	}
	out[key] = rewritten
	c.warnf(field, "%q rewritten as %q, the form image-toolkit accepts", s, rewritten)
}

// localRef copies a {name} reference to out[key].
func (c *fluxObject) localRef(ref *fluxLocalRef, key string, out map[string]any) bool {
	if ref == nil {
		return false
	}
	c.done(&ref.fields)
	if ref.Name == "" {
		c.failf(ref.path+".name", "is required")
		return false
	}
	out[key] = map[string]any{"name": ref.Name}
	return true
}

func setString(out map[string]any, key, v string) {
	if v != "" {
		out[key] = v
	}
}

func setBool(out map[string]any, key string, v bool) {
	if v {
		out[key] = true
	}
}

// convertFluxObject converts one Flux object. It returns the image-toolkit
// object, and the fluxObject with the warnings and problems; the object is
// only usable without problems.
func convertFluxObject(obj map[string]any) (map[string]any, *fluxObject) {
	var h fluxHeader
	decode(obj, &h)
	_, version, _ := strings.Cut(h.APIVersion, "/")
	c := &fluxObject{kind: h.Kind, version: version}
	if h.Metadata != nil {
		c.name, c.namespace = h.Metadata.Name, h.Metadata.Namespace
	}
	c.label = c.kind + " " + c.name
	if c.namespace != "" {
		c.label = c.kind + " " + c.namespace + "/" + c.name
	}
	if !slices.Contains(fluxImageVersions, version) {
		c.failf("apiVersion", "%s is not a version migrate reads (%s/%s); convert it with Flux first",
			h.APIVersion, FluxImageGroup, strings.Join(fluxImageVersions, ", "))
		return nil, c
	}
	var out map[string]any
	switch c.kind {
	case imagev1.ImageRepositoryKind:
		out = convertAs(c, obj, c.imageRepository)
	case imagev1.ImagePolicyKind:
		out = convertAs(c, obj, c.imagePolicy)
	case imagev1.ImageUpdateAutomationKind:
		out = convertAs(c, obj, c.imageUpdateAutomation)
	default:
		c.failf("kind", "%q has no image-toolkit equivalent (migrate converts ImageRepository, ImagePolicy and ImageUpdateAutomation)", c.kind)
		return nil, c
	}
	if out == nil {
		return nil, c
	}
	if len(c.problems) == 0 {
		if err := fitsOurAPI(c.kind, out); err != nil {
			// A converter bug, not the input's fault; still, say which object.
			c.failf("spec", "the converted object does not fit image-toolkit's %s (a bug in migrate): %v", c.kind, err)
		}
	}
	return out, c
}

// convertAs decodes obj as a Flux object with a spec of type S and converts
// it, its spec with convertSpec; nil when it has no metadata or spec.
func convertAs[S any](c *fluxObject, obj map[string]any, convertSpec func(*S) map[string]any) map[string]any {
	var doc fluxDocument[S]
	decode(obj, &doc)
	c.checked(&doc.fields)
	if doc.Metadata == nil {
		c.failf("metadata", "is required")
		return nil
	}
	meta := c.metadata(doc.Metadata)
	if doc.Spec == nil {
		c.failf("spec", "is required")
		return nil
	}
	spec := convertSpec(doc.Spec)
	doc.problems = nil // reported above
	c.done(&doc.fields)
	return map[string]any{
		"apiVersion": imagev1.GroupVersion.String(),
		"kind":       c.kind,
		"metadata":   meta,
		"spec":       spec,
	}
}

// fitsOurAPI decodes the converted object strictly into our Go type, so
// that no field our API lacks is ever written.
func fitsOurAPI(kind string, obj map[string]any) error {
	var into any
	switch kind {
	case imagev1.ImageRepositoryKind:
		into = &imagev1.ImageRepository{}
	case imagev1.ImagePolicyKind:
		into = &imagev1.ImagePolicy{}
	case imagev1.ImageUpdateAutomationKind:
		into = &imagev1.ImageUpdateAutomation{}
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// Annotations not carried over: Flux's reconcile request means nothing to
// image-toolkit (whose own is reconcile.toolkit.dev/requestedAt), and
// kubectl's last-applied-configuration holds the Flux object, which a later
// kubectl apply would diff against.
var droppedAnnotations = []string{
	"reconcile.fluxcd.io/requestedAt",
	"kubectl.kubernetes.io/last-applied-configuration",
}

func (c *fluxObject) metadata(md *fluxMetadata) map[string]any {
	c.checked(&md.fields)
	out := map[string]any{}
	if md.Name != "" {
		out["name"] = md.Name
	} else {
		c.failf("metadata.name", "is required")
	}
	setString(out, "namespace", md.Namespace)
	if len(md.Labels) > 0 {
		out["labels"] = md.Labels
	}
	if a := md.Annotations; len(a) > 0 {
		for _, k := range droppedAnnotations {
			delete(a, k)
		}
		if len(a) > 0 {
			out["annotations"] = a
		}
	}
	// Flux's finalizer would never be removed without Flux's controllers.
	for _, fin := range md.Finalizers {
		if fin != "finalizers.fluxcd.io" {
			c.warnf("metadata.finalizers", "%q dropped: migrate keeps name, namespace, labels and annotations", fin)
		}
	}
	for _, k := range md.unknown {
		c.warnf(at(md.path, k), "dropped: migrate keeps name, namespace, labels and annotations")
	}
	return out
}

func (c *fluxObject) imageRepository(spec *fluxImageRepositorySpec) map[string]any {
	out := map[string]any{}
	if spec.Insecure {
		out["insecure"] = true
	}
	c.repositoryImage(spec.Image, spec.Insecure, out)
	c.duration("spec.interval", spec.Interval, "interval", out, true, migrateIntervalRE)
	c.duration("spec.timeout", spec.Timeout, "timeout", out, false, migrateTimeoutRE)
	c.localRef(spec.SecretRef, "secretRef", out)
	setString(out, "serviceAccountName", spec.ServiceAccountName)
	if c.localRef(spec.CertSecretRef, "certSecretRef", out) {
		c.warnf("spec.certSecretRef", "image-toolkit reads the keys ca.crt, tls.crt and tls.key of the Secret; if it still has Flux's deprecated caFile, certFile and keyFile (Flux v1beta1's names), rename them")
	}
	c.localRef(spec.ProxySecretRef, "proxySecretRef", out)
	setBool(out, "suspend", spec.Suspend)
	if af := spec.AccessFrom; af != nil {
		c.accessFrom(af, out)
	}
	c.exclusionList(spec.ExclusionList, out)
	c.registryProvider(spec.Provider, spec.ServiceAccountName, out)
	c.done(&spec.fields)
	return out
}

// repositoryImage converts spec.image, warning where image-toolkit reads it
// otherwise than Flux: with a scheme, or a host Flux reaches over plain
// HTTP unasked.
func (c *fluxObject) repositoryImage(image string, insecure bool, out map[string]any) {
	switch {
	case image == "":
		c.failf("spec.image", "is required (image-toolkit rejects an empty image)")
	case strings.HasPrefix(strings.ToLower(image), "https://") || strings.HasPrefix(strings.ToLower(image), "http://"):
		// Flux fails on it; image-toolkit reads it as a chart of an
		// HTTP(S) Helm repository, which the Flux object did not mean.
		out["image"] = image
		c.warnf("spec.image", "%q has a scheme: image-toolkit reads http(s)://REPOSITORY/CHART as a chart of a Helm repository, not an image; give host/path, and spec.insecure for plain HTTP", image)
	case strings.Contains(image, "://"):
		out["image"] = image
		c.warnf("spec.image", "%q has a scheme: the ImageRepository will be Stalled (ImageURLInvalid); give host/path, and spec.insecure for plain HTTP", image)
	default:
		out["image"] = image
		repo, err := name.NewRepository(image)
		if err != nil {
			c.warnf("spec.image", "%q is not a repository without tag or digest: the ImageRepository will be Stalled (ImageURLInvalid)", image)
		} else if !insecure && repo.Registry.Scheme() == "http" {
			// go-containerregistry, which Flux uses, falls back to
			// plain HTTP for these hosts; image-toolkit never does so
			// unasked.
			c.warnf("spec.insecure", "Flux falls back to plain HTTP for %s (a local or private address) when HTTPS fails; image-toolkit only with spec.insecure: true: set it if the registry serves plain HTTP", repo.RegistryStr())
		}
	}
}

// accessFrom converts spec.accessFrom's namespace selectors, at most 32.
func (c *fluxObject) accessFrom(af *fluxAccessFrom, out map[string]any) {
	var sels []any
	for _, s := range af.NamespaceSelectors {
		sel := map[string]any{}
		if s.MatchLabels != nil {
			sel["matchLabels"] = s.MatchLabels
		}
		c.done(&s.fields)
		sels = append(sels, sel)
	}
	c.done(&af.fields)
	switch {
	case len(sels) > 32:
		c.failf("spec.accessFrom.namespaceSelectors", "has %d selectors; image-toolkit allows at most 32", len(sels))
	case len(sels) > 0:
		out["accessFrom"] = map[string]any{"namespaceSelectors": sels}
	}
	// No selectors grants no access, as no accessFrom does.
}

// exclusionList converts spec.exclusionList, at most 25 entries, warning of
// each that is not a Go regular expression.
func (c *fluxObject) exclusionList(list []string, out map[string]any) {
	if len(list) > 25 {
		c.failf("spec.exclusionList", "has %d entries; at most 25 are allowed", len(list))
		return
	}
	if len(list) == 0 {
		// An empty list is left out: Flux then applies its default,
		// ^.*\.sig$, and image-toolkit's CRD the same default only
		// when the field is absent.
		return
	}
	for i, e := range list {
		if _, err := regexp.Compile(e); err != nil {
			c.warnf(fmt.Sprintf("spec.exclusionList[%d]", i), "%q is not a Go regular expression: the ImageRepository will be Stalled (InvalidExclusionList): %v", e, err)
		}
	}
	out["exclusionList"] = list
}

// registryProvider converts spec.provider, warning that a cloud provider's
// ServiceAccount identity is opt-in in image-toolkit.
func (c *fluxObject) registryProvider(p, serviceAccount string, out map[string]any) {
	switch p {
	case "", "generic":
		setString(out, "provider", p)
	case "aws", "azure", "gcp":
		out["provider"] = p
		if serviceAccount != "" {
			// As in Flux 2.6, a ServiceAccount with a cloud provider is
			// object-level workload identity, which is opt-in.
			c.warnf("spec.serviceAccountName", "with provider %s, the ServiceAccount's cloud identity is used only when image-reflector-controller runs with --object-level-workload-identity (docs/cloud.md); otherwise the ImageRepository is Stalled (WorkloadIdentityNotEnabled)", p)
		}
	default:
		c.failf("spec.provider", "%q is not one of generic, aws, azure, gcp", p)
	}
}

func (c *fluxObject) imagePolicy(spec *fluxImagePolicySpec) map[string]any {
	out := map[string]any{}
	if ref := spec.ImageRepositoryRef; ref != nil {
		r := map[string]any{}
		if ref.Name != "" {
			r["name"] = ref.Name
		} else {
			c.failf("spec.imageRepositoryRef.name", "is required")
		}
		setString(r, "namespace", ref.Namespace)
		c.done(&ref.fields)
		out["imageRepositoryRef"] = r
	} else {
		c.failf("spec.imageRepositoryRef", "is required")
	}

	docker := false
	if pf := spec.Policy; pf != nil {
		out["policy"] = c.policyChoice(pf)
		docker = c.toDocker(out, spec.FilterTags)
	} else {
		c.failf("spec.policy", "is required")
	}

	if ft := spec.FilterTags; ft != nil {
		o := map[string]any{}
		pattern, extract := ft.Pattern, ft.Extract
		c.done(&ft.fields)
		if pattern != "" {
			o["pattern"] = pattern
			if _, err := regexp.Compile(pattern); err != nil {
				c.warnf("spec.filterTags.pattern", "%q is not a Go regular expression: the ImagePolicy will be Stalled (InvalidPolicy): %v", pattern, err)
			}
			setString(o, "extract", extract)
		} else if extract != "" {
			c.warnf("spec.filterTags.extract", "dropped: without filterTags.pattern image-toolkit rejects it (InvalidPolicy), and Flux has nothing to extract from")
		}
		if len(o) > 0 && !docker {
			out["filterTags"] = o
		}
	}

	drp := spec.DigestReflectionPolicy
	switch drp {
	case "", "Never", "IfNotPresent", "Always":
		setString(out, "digestReflectionPolicy", drp)
	default:
		c.failf("spec.digestReflectionPolicy", "%q is not Never, IfNotPresent or Always", drp)
	}
	// image-toolkit's CRD takes interval with, and only with, Always.
	interval := map[string]any{}
	c.duration("spec.interval", spec.Interval, "interval", interval, false, migrateIntervalRE)
	switch iv, ok := interval["interval"]; {
	case drp == "Always" && !ok:
		out["interval"] = "10m"
		c.warnf("spec.interval", "set to 10m, Flux's default with digestReflectionPolicy Always; image-toolkit requires it")
	case drp == "Always":
		out["interval"] = iv
	case ok:
		c.warnf("spec.interval", "dropped: it is only used, and image-toolkit only accepts it, with digestReflectionPolicy Always")
	}
	setBool(out, "suspend", spec.Suspend)
	c.done(&spec.fields)
	return out
}

// toDocker replaces Flux's recipe for a Docker-style tag, a pattern
// that fixes every number but the last and the suffix, extracting that
// last number in numerical asc order (^1\.(?P<minor>[0-9]+)-alpine$,
// $minor), by the docker kind that says it: range >=1 <2, compatible with
// 1.0-alpine. The two pick the same tags in the same order, but for a
// v-prefixed tag, which docker also reads; any other recipe stays as it is
// (false; numerical's own warning is given).
func (c *fluxObject) toDocker(out map[string]any, ft *fluxTagFilter) bool {
	pol, _ := out["policy"].(map[string]any)
	num, ok := pol["numerical"].(map[string]any)
	if !ok {
		return false
	}
	if ft != nil && (num["order"] == nil || num["order"] == "asc") {
		if rng, ref, ok := dockerRecipe(ft.Pattern, ft.Extract); ok {
			out["policy"] = map[string]any{"docker": map[string]any{"range": rng, "compatibleWith": ref}}
			c.warnf("spec.policy.numerical", "with filterTags %q and extract %q, written as docker {range: %q, compatibleWith: %q}: the same tags in the same order, and a v-prefixed tag too", ft.Pattern, ft.Extract, rng, ref)
			return true
		}
	}
	c.warnf("spec.policy.numerical", "image-toolkit skips tags (or extracted values) that are not numbers, where Flux fails the whole policy")
	return false
}

// policyChoice keeps the first policy Flux evaluates, in this order;
// image-toolkit's CRD wants exactly one.
func (c *fluxObject) policyChoice(pf *fluxPolicyChoice) map[string]any {
	outPolicy := map[string]any{}
	var chosen string
	for _, p := range []struct {
		key    string
		semver *fluxSemVerPolicy
		order  *fluxOrderPolicy
	}{{"semver", pf.SemVer, nil}, {"alphabetical", nil, pf.Alphabetical}, {"numerical", nil, pf.Numerical}} {
		if p.semver == nil && p.order == nil {
			continue
		}
		if chosen != "" {
			c.warnf("spec.policy."+p.key, "dropped: Flux uses only the first of semver, alphabetical and numerical (here %s), image-toolkit accepts only one", chosen)
			continue
		}
		chosen = p.key
		if sv := p.semver; sv != nil {
			rng := sv.Range
			if rng == "" {
				c.failf("spec.policy.semver.range", "is required")
			}
			outPolicy[p.key] = map[string]any{"range": rng}
			choice := imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: rng}}
			if _, err := policy.New(choice, nil); err != nil && rng != "" {
				c.warnf("spec.policy.semver.range", "%q does not parse: the ImagePolicy will be Stalled (InvalidPolicy): %v", rng, err)
			}
			c.done(&sv.fields)
			continue
		}
		o := map[string]any{}
		switch order := p.order.Order; order {
		case "", "asc", "desc":
			setString(o, "order", order)
		default:
			c.failf("spec.policy."+p.key+".order", "%q is not asc or desc", order)
		}
		outPolicy[p.key] = o
		c.done(&p.order.fields)
	}
	c.done(&pf.fields)
	if chosen == "" {
		c.failf("spec.policy", "sets none of semver, alphabetical, numerical")
	}
	return outPolicy
}

func (c *fluxObject) imageUpdateAutomation(spec *fluxImageUpdateAutomationSpec) map[string]any {
	out := map[string]any{}
	if sr := spec.SourceRef; sr != nil {
		ref := map[string]any{}
		setString(ref, "apiVersion", sr.APIVersion)
		if group, _, _ := strings.Cut(sr.APIVersion, "/"); sr.APIVersion != "" && group != gitsource.GitRepositoryGVK.Group {
			c.warnf("spec.sourceRef.apiVersion", "%q is not %s: the automation will be Stalled (InvalidSource)", sr.APIVersion, gitsource.GitRepositoryGVK.Group)
		}
		switch k := sr.Kind; k {
		case "", "GitRepository":
			setString(ref, "kind", k)
		default:
			c.failf("spec.sourceRef.kind", "%q is not GitRepository", k)
		}
		if sr.Name == "" {
			c.failf("spec.sourceRef.name", "is required")
		}
		setString(ref, "name", sr.Name)
		setString(ref, "namespace", sr.Namespace)
		c.done(&sr.fields)
		out["sourceRef"] = ref
		if sr.Namespace != "" && sr.Namespace != c.namespace {
			c.warnf("spec.sourceRef.namespace", "a GitRepository in another namespace is refused (AccessDenied) unless the automation controller runs with --no-cross-namespace-refs=false, and then its Secrets are read in the automation's namespace (Flux reads them in the GitRepository's)")
		}
	} else {
		// image-toolkit could use spec.git.repository instead, but a
		// Flux object always has a sourceRef: without one it is broken.
		c.failf("spec.sourceRef", "is required")
	}

	if gf := spec.Git; gf == nil {
		c.failf("spec.git", "is required: image-toolkit needs spec.git.commit.author.email to commit (Flux cannot push without it either)")
	} else {
		out["git"] = c.git(gf)
	}

	c.duration("spec.interval", spec.Interval, "interval", out, true, migrateIntervalRE)
	if ps := spec.PolicySelector; ps != nil {
		out["policySelector"] = c.labelSelector(ps)
	}
	if uf := spec.Update; uf != nil {
		update := map[string]any{"strategy": string(imagev1.UpdateStrategySetters)}
		switch s := uf.Strategy; s {
		case "", string(imagev1.UpdateStrategySetters):
		default:
			c.failf("spec.update.strategy", "%q is not Setters", s)
		}
		if p := c.updatePath(uf.Path); p != "" {
			update["path"] = p
		}
		c.done(&uf.fields)
		out["update"] = update
	}
	setBool(out, "suspend", spec.Suspend)
	c.done(&spec.fields)
	return out
}

func (c *fluxObject) git(gf *fluxGitSpec) map[string]any {
	checkoutBranch, pushBranch, refspec := "", "", ""
	git := map[string]any{}
	if co := gf.Checkout; co != nil {
		if rf := co.Ref; rf != nil {
			ref := map[string]any{}
			setString(ref, "branch", rf.Branch)
			setString(ref, "tag", rf.Tag)
			setString(ref, "semver", rf.SemVer)
			setString(ref, "name", rf.Name)
			setString(ref, "commit", rf.Commit)
			c.done(&rf.fields)
			if len(ref) == 0 {
				c.failf("spec.git.checkout.ref", "names no branch, tag, semver, name or commit")
			}
			if rf.Commit != "" && !migrateCommitRE.MatchString(rf.Commit) {
				c.failf("spec.git.checkout.ref.commit", "%q is not a hexadecimal commit SHA", rf.Commit)
			}
			checkoutBranch = rf.Branch
			git["checkout"] = map[string]any{"ref": ref}
		} else {
			c.failf("spec.git.checkout.ref", "is required")
		}
		c.done(&co.fields)
	}
	if cf := gf.Commit; cf != nil {
		git["commit"] = c.commit(cf)
	} else {
		c.failf("spec.git.commit", "is required")
	}
	if pf := gf.Push; pf != nil {
		push := map[string]any{}
		pushBranch = pf.Branch
		setString(push, "branch", pushBranch)
		refspec = c.refspec(pf.Refspec, checkoutBranch, pushBranch)
		setString(push, "refspec", refspec)
		if opts := pf.Options; len(opts) > 0 {
			push["options"] = opts
			c.warnf("spec.git.push.options", "kept, but image-toolkit cannot send push options (libgit2 1.5): its jobs fail (InvalidSpec) rather than push without them; remove them to push")
		}
		c.done(&pf.fields)
		if len(push) > 0 {
			git["push"] = push
		}
	}
	c.done(&gf.fields)
	if _, ok := git["checkout"]; ok && checkoutBranch == "" && pushBranch == "" && refspec == "" {
		c.warnf("spec.git.checkout.ref", "is not a branch, and spec.git.push sets no branch or refspec: the automation will be Stalled (InvalidSpec) until it names where to push")
	}
	return git
}

func (c *fluxObject) commit(cf *fluxCommitSpec) map[string]any {
	commit := map[string]any{}
	if af := cf.Author; af != nil {
		author := map[string]any{}
		setString(author, "name", af.Name)
		if len(af.Email) < 3 {
			c.failf("spec.git.commit.author.email", "is required")
		}
		setString(author, "email", af.Email)
		c.done(&af.fields)
		commit["author"] = author
	} else {
		c.failf("spec.git.commit.author", "is required")
	}
	if sk := cf.SigningKey; sk != nil {
		key := map[string]any{}
		if !c.localRef(sk.SecretRef, "secretRef", key) {
			c.failf("spec.git.commit.signingKey.secretRef", "is required")
		}
		switch t := sk.Type; t {
		case "", "gpg", "ssh":
			setString(key, "type", t)
		default:
			c.failf("spec.git.commit.signingKey.type", "%q is not gpg or ssh", t)
		}
		c.done(&sk.fields)
		commit["signingKey"] = key
	}
	tmpl := cf.MessageTemplate
	setString(commit, "messageTemplate", tmpl)
	values := cf.MessageTemplateValues
	if len(values) > 0 {
		commit["messageTemplateValues"] = values
	}
	c.done(&cf.fields)
	if strings.TrimSpace(tmpl) != "" {
		// The same check the automation makes before any job: the
		// template gets .AutomationObject, .Changed and .Values.
		if err := commitmsg.Validate(tmpl, values); err != nil {
			c.warnf("spec.git.commit.messageTemplate", "%v; the automation will be Stalled (InvalidMessageTemplate) until the template is fixed", err)
		}
	}
	return commit
}

// refspec checks a push refspec: image-toolkit's job has the new commit at
// HEAD and on the checkout branch only, so it must be the source. Flux
// commits on the push branch, so a refspec from it is rewritten to HEAD.
func (c *fluxObject) refspec(rs, checkoutBranch, pushBranch string) string {
	if rs == "" {
		return ""
	}
	force := ""
	if strings.HasPrefix(rs, "+") {
		force = "+"
	}
	src, dst, hasDst := strings.Cut(strings.TrimPrefix(rs, "+"), ":")
	short := strings.TrimPrefix(src, "refs/heads/")
	switch {
	case src == "HEAD" || (checkoutBranch != "" && short == checkoutBranch):
		return rs
	case pushBranch != "" && short == pushBranch && hasDst:
		rewritten := force + "HEAD:" + dst
		c.warnf("spec.git.push.refspec", "%q rewritten as %q: Flux commits on the push branch, image-toolkit's job has the commit at HEAD", rs, rewritten)
		return rewritten
	default:
		c.warnf("spec.git.push.refspec", "the source of %q must be HEAD or the checkout branch in image-toolkit (Flux accepts any local ref): its jobs would fail (InvalidSpec)", rs)
		return rs
	}
}

// updatePath makes spec.update.path one image-toolkit's CRD accepts:
// relative, without "..". Flux joins it to the checkout securely, so a
// leading / means the repository root there too.
func (c *fluxObject) updatePath(p string) string {
	if p == "" {
		return ""
	}
	rel := strings.TrimLeft(p, "/")
	if slices.Contains(strings.Split(rel, "/"), "..") {
		cleaned := path.Clean(rel)
		if cleaned == ".." || strings.HasPrefix(cleaned, "../") {
			c.failf("spec.update.path", "%q leaves the repository (Flux fails on it too)", p)
			return ""
		}
		rel = cleaned
	}
	if rel != p {
		c.warnf("spec.update.path", "%q rewritten as %q: image-toolkit accepts only relative paths without \"..\"", p, rel)
	}
	if rel == "" || rel == "." {
		return ""
	}
	return rel
}

func (c *fluxObject) labelSelector(ps *fluxLabelSelector) map[string]any {
	sel := map[string]any{}
	var typed metav1.LabelSelector
	if ps.MatchLabels != nil {
		sel["matchLabels"] = ps.MatchLabels
		typed.MatchLabels = ps.MatchLabels
	}
	var exprs []any
	for _, ef := range ps.MatchExpressions {
		e := map[string]any{"key": ef.Key, "operator": ef.Operator}
		if len(ef.Values) > 0 {
			e["values"] = ef.Values
		}
		c.done(&ef.fields)
		exprs = append(exprs, e)
		typed.MatchExpressions = append(typed.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: ef.Key, Operator: metav1.LabelSelectorOperator(ef.Operator), Values: ef.Values,
		})
	}
	if len(exprs) > 0 {
		sel["matchExpressions"] = exprs
	}
	c.done(&ps.fields)
	if _, err := metav1.LabelSelectorAsSelector(&typed); err != nil {
		c.warnf("spec.policySelector", "is not a valid label selector: the automation will be Stalled (InvalidPolicySelector): %v", err)
	}
	return sel
}
