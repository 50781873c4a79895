package migrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
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

// fluxFields reads one map of a Flux object, remembering the keys it read so
// that the others can be reported as unknown and dropped.
type fluxFields struct {
	obj  *fluxObject
	path string
	m    map[string]any
	read map[string]bool
}

func (c *fluxObject) fieldsAt(path string, m map[string]any) *fluxFields {
	return &fluxFields{obj: c, path: path, m: m, read: map[string]bool{}}
}

func (f *fluxFields) at(key string) string {
	if f.path == "" {
		return key
	}
	return f.path + "." + key
}

// value marks key read and returns its value; nil when absent or null.
func (f *fluxFields) value(key string) any {
	f.read[key] = true
	return f.m[key]
}

func (f *fluxFields) str(key string) string {
	switch v := f.value(key).(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		f.obj.failf(f.at(key), "want a string, got %s", migDescribe(v))
		return ""
	}
}

func (f *fluxFields) boolean(key string) bool {
	switch v := f.value(key).(type) {
	case nil:
		return false
	case bool:
		return v
	default:
		f.obj.failf(f.at(key), "want true or false, got %s", migDescribe(v))
		return false
	}
}

func (f *fluxFields) object(key string) *fluxFields {
	switch v := f.value(key).(type) {
	case nil:
		return nil
	case map[string]any:
		return f.obj.fieldsAt(f.at(key), v)
	default:
		f.obj.failf(f.at(key), "want an object, got %s", migDescribe(v))
		return nil
	}
}

// objects returns the items of a list of objects, each with its own path.
func (f *fluxFields) objects(key string) []*fluxFields {
	var out []*fluxFields
	for i, it := range f.list(key) {
		m, ok := it.(map[string]any)
		if !ok {
			f.obj.failf(fmt.Sprintf("%s[%d]", f.at(key), i), "want an object, got %s", migDescribe(it))
			continue
		}
		out = append(out, f.obj.fieldsAt(fmt.Sprintf("%s[%d]", f.at(key), i), m))
	}
	return out
}

func (f *fluxFields) list(key string) []any {
	switch v := f.value(key).(type) {
	case nil:
		return nil
	case []any:
		return v
	default:
		f.obj.failf(f.at(key), "want a list, got %s", migDescribe(v))
		return nil
	}
}

func (f *fluxFields) strings(key string) []string {
	var out []string
	for i, it := range f.list(key) {
		s, ok := it.(string)
		if !ok {
			f.obj.failf(fmt.Sprintf("%s[%d]", f.at(key), i), "want a string, got %s", migDescribe(it))
			continue
		}
		out = append(out, s)
	}
	return out
}

// stringMap returns a map of strings; an empty map given as {} stays an
// empty map (not nil), since {} can mean something (e.g. every namespace).
func (f *fluxFields) stringMap(key string) map[string]any {
	switch v := f.value(key).(type) {
	case nil:
		return nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, val := range v {
			s, ok := val.(string)
			if !ok {
				f.obj.failf(f.at(key)+"."+k, "want a string, got %s", migDescribe(val))
				continue
			}
			out[k] = s
		}
		return out
	default:
		f.obj.failf(f.at(key), "want an object of strings, got %s", migDescribe(v))
		return nil
	}
}

// rest warns about the keys nobody read, which are dropped.
func (f *fluxFields) rest() {
	var unknown []string
	for k := range f.m {
		if !f.read[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		f.obj.warnf(f.at(k), "image-toolkit's %s has no such field; dropped", f.obj.kind)
	}
}

func migDescribe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case bool:
		return fmt.Sprintf("%t", v)
	case json.Number:
		return "the number " + v.String()
	case float64:
		return fmt.Sprintf("the number %v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
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
func (c *fluxObject) duration(f *fluxFields, key string, out map[string]any, required bool, pattern *regexp.Regexp) {
	s := f.str(key)
	if s == "" {
		if required {
			c.failf(f.at(key), "is required")
		}
		return
	}
	if pattern.MatchString(s) {
		out[key] = s
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		c.failf(f.at(key), "%q is not a duration such as 30s, 5m or 1h", s)
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
		c.failf(f.at(key), "%q cannot be written in the form image-toolkit accepts (%s)", s, pattern)
		return
	}
	out[key] = rewritten
	c.warnf(f.at(key), "%q rewritten as %q, the form image-toolkit accepts", s, rewritten)
}

// localRef copies a {name} reference.
func (c *fluxObject) localRef(f *fluxFields, key string, out map[string]any) bool {
	ref := f.object(key)
	if ref == nil {
		return false
	}
	n := ref.str("name")
	ref.rest()
	if n == "" {
		c.failf(f.at(key)+".name", "is required")
		return false
	}
	out[key] = map[string]any{"name": n}
	return true
}

func migSetString(out map[string]any, key, v string) {
	if v != "" {
		out[key] = v
	}
}

func migSetBool(out map[string]any, f *fluxFields, key string) {
	if f.boolean(key) {
		out[key] = true
	}
}

// convertFluxObject converts one Flux object. It returns the image-toolkit
// object, and the fluxObject with the warnings and problems; the object is
// only usable without problems.
func convertFluxObject(obj map[string]any) (map[string]any, *fluxObject) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	_, version, _ := strings.Cut(apiVersion, "/")
	c := &fluxObject{kind: kind, version: version}
	md, _ := obj["metadata"].(map[string]any)
	c.name, _ = md["name"].(string)
	c.namespace, _ = md["namespace"].(string)
	c.label = kind + " " + c.name
	if c.namespace != "" {
		c.label = kind + " " + c.namespace + "/" + c.name
	}
	if !slices.Contains(fluxImageVersions, version) {
		c.failf("apiVersion", "%s is not a version migrate reads (%s/%s); convert it with Flux first",
			apiVersion, FluxImageGroup, strings.Join(fluxImageVersions, ", "))
		return nil, c
	}
	top := c.fieldsAt("", obj)
	top.read["apiVersion"], top.read["kind"] = true, true
	// The status is the controllers' to write; image-toolkit's differs.
	top.value("status")
	var convert func(*fluxFields) map[string]any
	switch kind {
	case imagev1.ImageRepositoryKind:
		convert = c.imageRepository
	case imagev1.ImagePolicyKind:
		convert = c.imagePolicy
	case imagev1.ImageUpdateAutomationKind:
		convert = c.imageUpdateAutomation
	default:
		c.failf("kind", "%q has no image-toolkit equivalent (migrate converts ImageRepository, ImagePolicy and ImageUpdateAutomation)", kind)
		return nil, c
	}
	mdf := top.object("metadata")
	if mdf == nil {
		c.failf("metadata", "is required")
		return nil, c
	}
	meta := c.metadata(mdf)
	specf := top.object("spec")
	if specf == nil {
		c.failf("spec", "is required")
		return nil, c
	}
	spec := convert(specf)
	specf.rest()
	top.rest()
	out := map[string]any{
		"apiVersion": imagev1.GroupVersion.String(),
		"kind":       kind,
		"metadata":   meta,
		"spec":       spec,
	}
	if len(c.problems) == 0 {
		if err := fitsOurAPI(kind, out); err != nil {
			// A converter bug, not the input's fault; still, say which object.
			c.failf("spec", "the converted object does not fit image-toolkit's %s (a bug in migrate): %v", kind, err)
		}
	}
	return out, c
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

func (c *fluxObject) metadata(md *fluxFields) map[string]any {
	out := map[string]any{}
	if n := md.str("name"); n != "" {
		out["name"] = n
	} else {
		c.failf("metadata.name", "is required")
	}
	migSetString(out, "namespace", md.str("namespace"))
	if l := md.stringMap("labels"); len(l) > 0 {
		out["labels"] = l
	}
	if a := md.stringMap("annotations"); len(a) > 0 {
		for _, k := range droppedAnnotations {
			delete(a, k)
		}
		if len(a) > 0 {
			out["annotations"] = a
		}
	}
	// Written by the API server for the object it stored; a new object
	// gets its own.
	for _, k := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
		"selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
		md.value(k)
	}
	// Flux's finalizer would never be removed without Flux's controllers.
	for _, fin := range md.strings("finalizers") {
		if fin != "finalizers.fluxcd.io" {
			c.warnf("metadata.finalizers", "%q dropped: migrate keeps name, namespace, labels and annotations", fin)
		}
	}
	for k := range md.m {
		if !md.read[k] {
			md.read[k] = true
			c.warnf(md.at(k), "dropped: migrate keeps name, namespace, labels and annotations")
		}
	}
	return out
}

func (c *fluxObject) imageRepository(spec *fluxFields) map[string]any {
	out := map[string]any{}
	image := spec.str("image")
	insecure := spec.boolean("insecure")
	if insecure {
		out["insecure"] = true
	}
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
	c.duration(spec, "interval", out, true, migrateIntervalRE)
	c.duration(spec, "timeout", out, false, migrateTimeoutRE)
	c.localRef(spec, "secretRef", out)
	sa := spec.str("serviceAccountName")
	migSetString(out, "serviceAccountName", sa)
	if c.localRef(spec, "certSecretRef", out) {
		c.warnf("spec.certSecretRef", "image-toolkit reads the keys ca.crt, tls.crt and tls.key of the Secret; if it still has Flux's deprecated caFile, certFile and keyFile (Flux v1beta1's names), rename them")
	}
	c.localRef(spec, "proxySecretRef", out)
	migSetBool(out, spec, "suspend")
	if af := spec.object("accessFrom"); af != nil {
		var sels []any
		for _, s := range af.objects("namespaceSelectors") {
			sel := map[string]any{}
			if ml := s.stringMap("matchLabels"); ml != nil {
				sel["matchLabels"] = ml
			}
			s.rest()
			sels = append(sels, sel)
		}
		af.rest()
		switch {
		case len(sels) > 32:
			c.failf("spec.accessFrom.namespaceSelectors", "has %d selectors; image-toolkit allows at most 32", len(sels))
		case len(sels) > 0:
			out["accessFrom"] = map[string]any{"namespaceSelectors": sels}
		}
		// No selectors grants no access, as no accessFrom does.
	}
	if list := spec.strings("exclusionList"); len(list) > 25 {
		c.failf("spec.exclusionList", "has %d entries; at most 25 are allowed", len(list))
	} else if len(list) > 0 {
		// An empty list is left out: Flux then applies its default,
		// ^.*\.sig$, and image-toolkit's CRD the same default only
		// when the field is absent.
		for i, e := range list {
			if _, err := regexp.Compile(e); err != nil {
				c.warnf(fmt.Sprintf("spec.exclusionList[%d]", i), "%q is not a Go regular expression: the ImageRepository will be Stalled (InvalidExclusionList): %v", e, err)
			}
		}
		out["exclusionList"] = list
	}
	switch p := spec.str("provider"); p {
	case "", "generic":
		migSetString(out, "provider", p)
	case "aws", "azure", "gcp":
		out["provider"] = p
		if spec.str("serviceAccountName") != "" {
			// As in Flux 2.6, a ServiceAccount with a cloud provider is
			// object-level workload identity, which is opt-in.
			c.warnf("spec.serviceAccountName", "with provider %s, the ServiceAccount's cloud identity is used only when image-reflector-controller runs with --object-level-workload-identity (docs/cloud.md); otherwise the ImageRepository is Stalled (WorkloadIdentityNotEnabled)", p)
		}
	default:
		c.failf("spec.provider", "%q is not one of generic, aws, azure, gcp", p)
	}
	return out
}

func (c *fluxObject) imagePolicy(spec *fluxFields) map[string]any {
	out := map[string]any{}
	if ref := spec.object("imageRepositoryRef"); ref != nil {
		r := map[string]any{}
		if n := ref.str("name"); n != "" {
			r["name"] = n
		} else {
			c.failf("spec.imageRepositoryRef.name", "is required")
		}
		migSetString(r, "namespace", ref.str("namespace"))
		ref.rest()
		out["imageRepositoryRef"] = r
	} else {
		c.failf("spec.imageRepositoryRef", "is required")
	}

	// Flux evaluates the first choice set, in this order; image-toolkit's
	// CRD wants exactly one.
	choice := imagev1.ImagePolicyChoice{}
	if pf := spec.object("policy"); pf != nil {
		outPolicy := map[string]any{}
		var chosen string
		for _, key := range []string{"semver", "alphabetical", "numerical"} {
			sub := pf.object(key)
			if sub == nil {
				continue
			}
			if chosen != "" {
				sub.value("range")
				sub.value("order")
				c.warnf("spec.policy."+key, "dropped: Flux uses only the first of semver, alphabetical and numerical (here %s), image-toolkit accepts only one", chosen)
				continue
			}
			chosen = key
			switch key {
			case "semver":
				rng := sub.str("range")
				if rng == "" {
					c.failf("spec.policy.semver.range", "is required")
				}
				outPolicy[key] = map[string]any{"range": rng}
				choice.SemVer = &imagev1.SemVerPolicy{Range: rng}
				if _, err := policy.New(choice, nil); err != nil && rng != "" {
					c.warnf("spec.policy.semver.range", "%q does not parse: the ImagePolicy will be Stalled (InvalidPolicy): %v", rng, err)
				}
			default:
				o := map[string]any{}
				switch order := sub.str("order"); order {
				case "", "asc", "desc":
					migSetString(o, "order", order)
				default:
					c.failf("spec.policy."+key+".order", "%q is not asc or desc", order)
				}
				outPolicy[key] = o
				if key == "numerical" {
					c.warnf("spec.policy.numerical", "image-toolkit skips tags (or extracted values) that are not numbers, where Flux fails the whole policy")
				}
			}
			sub.rest()
		}
		pf.rest()
		if chosen == "" {
			c.failf("spec.policy", "sets none of semver, alphabetical, numerical")
		}
		out["policy"] = outPolicy
	} else {
		c.failf("spec.policy", "is required")
	}

	if ft := spec.object("filterTags"); ft != nil {
		o := map[string]any{}
		pattern, extract := ft.str("pattern"), ft.str("extract")
		ft.rest()
		if pattern != "" {
			o["pattern"] = pattern
			if _, err := regexp.Compile(pattern); err != nil {
				c.warnf("spec.filterTags.pattern", "%q is not a Go regular expression: the ImagePolicy will be Stalled (InvalidPolicy): %v", pattern, err)
			}
			migSetString(o, "extract", extract)
		} else if extract != "" {
			c.warnf("spec.filterTags.extract", "dropped: without filterTags.pattern image-toolkit rejects it (InvalidPolicy), and Flux has nothing to extract from")
		}
		if len(o) > 0 {
			out["filterTags"] = o
		}
	}

	drp := spec.str("digestReflectionPolicy")
	switch drp {
	case "", "Never", "IfNotPresent", "Always":
		migSetString(out, "digestReflectionPolicy", drp)
	default:
		c.failf("spec.digestReflectionPolicy", "%q is not Never, IfNotPresent or Always", drp)
	}
	// image-toolkit's CRD takes interval with, and only with, Always.
	interval := map[string]any{}
	c.duration(spec, "interval", interval, false, migrateIntervalRE)
	switch iv, ok := interval["interval"]; {
	case drp == "Always" && !ok:
		out["interval"] = "10m"
		c.warnf("spec.interval", "set to 10m, Flux's default with digestReflectionPolicy Always; image-toolkit requires it")
	case drp == "Always":
		out["interval"] = iv
	case ok:
		c.warnf("spec.interval", "dropped: it is only used, and image-toolkit only accepts it, with digestReflectionPolicy Always")
	}
	migSetBool(out, spec, "suspend")
	return out
}

func (c *fluxObject) imageUpdateAutomation(spec *fluxFields) map[string]any {
	out := map[string]any{}
	if sr := spec.object("sourceRef"); sr != nil {
		ref := map[string]any{}
		apiVersion := sr.str("apiVersion")
		migSetString(ref, "apiVersion", apiVersion)
		if group, _, _ := strings.Cut(apiVersion, "/"); apiVersion != "" && group != gitsource.GitRepositoryGVK.Group {
			c.warnf("spec.sourceRef.apiVersion", "%q is not %s: the automation will be Stalled (InvalidSource)", apiVersion, gitsource.GitRepositoryGVK.Group)
		}
		switch k := sr.str("kind"); k {
		case "", "GitRepository":
			migSetString(ref, "kind", k)
		default:
			c.failf("spec.sourceRef.kind", "%q is not GitRepository", k)
		}
		n := sr.str("name")
		if n == "" {
			c.failf("spec.sourceRef.name", "is required")
		}
		migSetString(ref, "name", n)
		ns := sr.str("namespace")
		migSetString(ref, "namespace", ns)
		sr.rest()
		out["sourceRef"] = ref
		if ns != "" && ns != c.namespace {
			c.warnf("spec.sourceRef.namespace", "a GitRepository in another namespace is refused (AccessDenied) unless the automation controller runs with --no-cross-namespace-refs=false, and then its Secrets are read in the automation's namespace (Flux reads them in the GitRepository's)")
		}
	} else {
		// image-toolkit could use spec.git.repository instead, but a
		// Flux object always has a sourceRef: without one it is broken.
		c.failf("spec.sourceRef", "is required")
	}

	checkoutBranch, pushBranch, refspec := "", "", ""
	gf := spec.object("git")
	if gf == nil {
		c.failf("spec.git", "is required: image-toolkit needs spec.git.commit.author.email to commit (Flux cannot push without it either)")
	} else {
		git := map[string]any{}
		if co := gf.object("checkout"); co != nil {
			if rf := co.object("ref"); rf != nil {
				ref := map[string]any{}
				for _, key := range []string{"branch", "tag", "semver", "name", "commit"} {
					migSetString(ref, key, rf.str(key))
				}
				rf.rest()
				if len(ref) == 0 {
					c.failf("spec.git.checkout.ref", "names no branch, tag, semver, name or commit")
				}
				if cm, ok := ref["commit"].(string); ok && !migrateCommitRE.MatchString(cm) {
					c.failf("spec.git.checkout.ref.commit", "%q is not a hexadecimal commit SHA", cm)
				}
				checkoutBranch, _ = ref["branch"].(string)
				git["checkout"] = map[string]any{"ref": ref}
			} else {
				c.failf("spec.git.checkout.ref", "is required")
			}
			co.rest()
		}
		if cf := gf.object("commit"); cf != nil {
			git["commit"] = c.commit(cf)
		} else {
			c.failf("spec.git.commit", "is required")
		}
		if pf := gf.object("push"); pf != nil {
			push := map[string]any{}
			pushBranch = pf.str("branch")
			migSetString(push, "branch", pushBranch)
			refspec = c.refspec(pf.str("refspec"), checkoutBranch, pushBranch)
			migSetString(push, "refspec", refspec)
			if opts := pf.stringMap("options"); len(opts) > 0 {
				push["options"] = opts
				c.warnf("spec.git.push.options", "kept, but image-toolkit cannot send push options (libgit2 1.5): its jobs fail (InvalidSpec) rather than push without them; remove them to push")
			}
			pf.rest()
			if len(push) > 0 {
				git["push"] = push
			}
		}
		gf.rest()
		if _, ok := git["checkout"]; ok && checkoutBranch == "" && pushBranch == "" && refspec == "" {
			c.warnf("spec.git.checkout.ref", "is not a branch, and spec.git.push sets no branch or refspec: the automation will be Stalled (InvalidSpec) until it names where to push")
		}
		out["git"] = git
	}

	c.duration(spec, "interval", out, true, migrateIntervalRE)
	if ps := spec.object("policySelector"); ps != nil {
		out["policySelector"] = c.labelSelector(ps)
	}
	if uf := spec.object("update"); uf != nil {
		update := map[string]any{"strategy": string(imagev1.UpdateStrategySetters)}
		switch s := uf.str("strategy"); s {
		case "", string(imagev1.UpdateStrategySetters):
		default:
			c.failf("spec.update.strategy", "%q is not Setters", s)
		}
		if p := c.updatePath(uf.str("path")); p != "" {
			update["path"] = p
		}
		uf.rest()
		out["update"] = update
	}
	migSetBool(out, spec, "suspend")
	return out
}

func (c *fluxObject) commit(cf *fluxFields) map[string]any {
	commit := map[string]any{}
	if af := cf.object("author"); af != nil {
		author := map[string]any{}
		migSetString(author, "name", af.str("name"))
		email := af.str("email")
		if len(email) < 3 {
			c.failf("spec.git.commit.author.email", "is required")
		}
		migSetString(author, "email", email)
		af.rest()
		commit["author"] = author
	} else {
		c.failf("spec.git.commit.author", "is required")
	}
	if sk := cf.object("signingKey"); sk != nil {
		key := map[string]any{}
		c.localRef(sk, "secretRef", key)
		if _, ok := key["secretRef"]; !ok {
			c.failf("spec.git.commit.signingKey.secretRef", "is required")
		}
		switch t := sk.str("type"); t {
		case "", "gpg", "ssh":
			migSetString(key, "type", t)
		default:
			c.failf("spec.git.commit.signingKey.type", "%q is not gpg or ssh", t)
		}
		sk.rest()
		commit["signingKey"] = key
	}
	tmpl := cf.str("messageTemplate")
	migSetString(commit, "messageTemplate", tmpl)
	values := cf.stringMap("messageTemplateValues")
	if len(values) > 0 {
		commit["messageTemplateValues"] = values
	}
	cf.rest()
	if strings.TrimSpace(tmpl) != "" {
		vals := map[string]string{}
		for k, v := range values {
			vals[k], _ = v.(string)
		}
		// The same check the automation makes before any job: the
		// template gets .AutomationObject, .Changed and .Values.
		if err := commitmsg.Validate(tmpl, vals); err != nil {
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

func (c *fluxObject) labelSelector(ps *fluxFields) map[string]any {
	sel := map[string]any{}
	var typed metav1.LabelSelector
	if ml := ps.stringMap("matchLabels"); ml != nil {
		sel["matchLabels"] = ml
		typed.MatchLabels = map[string]string{}
		for k, v := range ml {
			typed.MatchLabels[k], _ = v.(string)
		}
	}
	var exprs []any
	for _, ef := range ps.objects("matchExpressions") {
		e := map[string]any{"key": ef.str("key"), "operator": ef.str("operator")}
		values := ef.strings("values")
		if len(values) > 0 {
			e["values"] = values
		}
		ef.rest()
		exprs = append(exprs, e)
		typed.MatchExpressions = append(typed.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: e["key"].(string), Operator: metav1.LabelSelectorOperator(e["operator"].(string)), Values: values,
		})
	}
	if len(exprs) > 0 {
		sel["matchExpressions"] = exprs
	}
	ps.rest()
	if _, err := metav1.LabelSelectorAsSelector(&typed); err != nil {
		c.warnf("spec.policySelector", "is not a valid label selector: the automation will be Stalled (InvalidPolicySelector): %v", err)
	}
	return sel
}
