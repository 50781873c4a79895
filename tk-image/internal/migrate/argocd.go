package migrate

// argocd-image-updater's configuration, converted: the annotations of its
// v0.x releases on Argo CD Applications (argocd-image-updater.argoproj.io/
// image-list and the keys beside it), and the ImageUpdater objects of its
// v1.x releases (argocd-image-updater.argoproj.io/v1alpha1). Each image
// becomes an ImageRepository and an ImagePolicy; each Application (v0.x)
// or applicationRef (v1.x) an ImageUpdateAutomation writing Argo CD's
// override files (strategy ArgoCD), as image-updater's git write-back does.
// The facts come from image-updater's documentation (docs/configuration/
// images.md, applications.md, migration.md, basics/update-methods.md and
// update-strategies.md): an image is [<alias>=]<name>[:<constraint>], the
// strategies are semver (the default), newest-build (latest), alphabetical
// (name) and digest, allow-tags is regexp:<re> or any, ignore-tags are glob
// patterns, and the default commit author is argocd-image-updater
// <noreply@argoproj.io>.

import (
	"cmp"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
)

const (
	// ImageUpdaterGroup is the API group of argocd-image-updater's
	// ImageUpdater (v1.x).
	ImageUpdaterGroup = "argocd-image-updater.argoproj.io"
	// imageUpdaterPrefix starts the annotations of its v0.x releases.
	imageUpdaterPrefix = "argocd-image-updater.argoproj.io/"
	argoGroup          = "argoproj.io"
	// imageUpdaterInterval is how often image-updater checks by default
	// (its --interval), which the objects made here keep.
	imageUpdaterInterval = "2m"
	// migratedLabel is on the policies made for one Application or
	// applicationRef, which its automation selects by it.
	migratedLabel = "image.toolkit.dev/migrated-from"
	// selectLabel is the label an automation selects Applications by
	// when image-updater selected them by a name pattern.
	selectLabel = "image.toolkit.dev/updated-by"
)

// isImageUpdaterConfig tells an object argocd-image-updater is configured
// by: an ImageUpdater, or an Application with an image-list annotation.
func isImageUpdaterConfig(obj map[string]any) bool {
	apiVersion, _ := obj["apiVersion"].(string)
	group, _, _ := strings.Cut(apiVersion, "/")
	kind, _ := obj["kind"].(string)
	switch {
	case group == ImageUpdaterGroup && kind == "ImageUpdater":
		return true
	case group == argoGroup && kind == "Application":
		md, _ := obj["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		_, ok := ann[imageUpdaterPrefix+"image-list"]
		return ok
	}
	return false
}

// The fields of an ImageUpdater (v1.x) migrate reads, in a
// fluxDocument[iuSpec].
type iuSpec struct {
	fields
	// Namespace was removed in later v1.x releases: the object's own
	// namespace is where the Applications are.
	Namespace       string       `json:"namespace"`
	Common          *iuCommon    `json:"commonUpdateSettings"`
	WriteBack       *iuWriteBack `json:"writeBackConfig"`
	ApplicationRefs []iuAppRef   `json:"applicationRefs"`
	UseAnnotations  any          `json:"useAnnotations"`
}

type iuAppRef struct {
	fields
	NamePattern    string             `json:"namePattern"`
	LabelSelectors *fluxLabelSelector `json:"labelSelectors"`
	Common         *iuCommon          `json:"commonUpdateSettings"`
	WriteBack      *iuWriteBack       `json:"writeBackConfig"`
	Images         []iuImage          `json:"images"`
	UseAnnotations bool               `json:"useAnnotations"`
}

type iuImage struct {
	fields
	Alias     string     `json:"alias"`
	ImageName string     `json:"imageName"`
	Common    *iuCommon  `json:"commonUpdateSettings"`
	Targets   *iuTargets `json:"manifestTargets"`
}

type iuCommon struct {
	fields
	UpdateStrategy string   `json:"updateStrategy"`
	ForceUpdate    bool     `json:"forceUpdate"`
	AllowTags      string   `json:"allowTags"`
	IgnoreTags     []string `json:"ignoreTags"`
	PullSecret     string   `json:"pullSecret"`
	Platforms      []string `json:"platforms"`
}

type iuWriteBack struct {
	fields
	Method string       `json:"method"`
	Git    *iuGitConfig `json:"gitConfig"`
}

type iuGitConfig struct {
	fields
	Repository      string `json:"repository"`
	Branch          string `json:"branch"`
	WriteBackTarget string `json:"writeBackTarget"`
}

type iuTargets struct {
	fields
	Helm *struct {
		fields
		Name string `json:"name"`
		Tag  string `json:"tag"`
		Spec string `json:"spec"`
	} `json:"helm"`
	Kustomize *struct {
		fields
		Name string `json:"name"`
	} `json:"kustomize"`
}

// updaterSettings are the settings of one image, with the more specific
// level's winning, as image-updater merges them.
type updaterSettings struct {
	strategy, allowTags, pullSecret string
	force                           bool
	ignoreTags, platforms           []string
}

func (s updaterSettings) with(c *iuCommon) updaterSettings {
	if c == nil {
		return s
	}
	s.strategy = cmp.Or(c.UpdateStrategy, s.strategy)
	s.allowTags = cmp.Or(c.AllowTags, s.allowTags)
	s.pullSecret = cmp.Or(c.PullSecret, s.pullSecret)
	s.force = s.force || c.ForceUpdate
	if c.IgnoreTags != nil {
		s.ignoreTags = c.IgnoreTags
	}
	if c.Platforms != nil {
		s.platforms = c.Platforms
	}
	return s
}

// writeBack is where an automation writes: image-updater's method, branch
// and target.
type writeBack struct {
	method, branch, target, repository string
}

func (w writeBack) with(wb *iuWriteBack) writeBack {
	if wb == nil {
		return w
	}
	w.method = cmp.Or(wb.Method, w.method)
	if g := wb.Git; g != nil {
		w.branch = cmp.Or(g.Branch, w.branch)
		w.target = cmp.Or(g.WriteBackTarget, w.target)
		w.repository = cmp.Or(g.Repository, w.repository)
	}
	return w
}

// updaterImage is one image as image-updater configures it.
type updaterImage struct {
	alias, image                               string // image: name[:constraint]
	field                                      string // where it was configured, for messages
	settings                                   updaterSettings
	helmName, helmTag, helmSpec, kustomizeName string
}

// updaterTarget is what one automation is made from.
type updaterTarget struct {
	name, namespace string
	// source is the automation's sourceRef (an Application's name) or
	// applicationSelector.
	application string
	selector    map[string]any
	appPath     string // the Application's path, "" when unknown
	images      []updaterImage
	writeBack   writeBack
	field       string // the field that configured the write-back
}

// convertImageUpdaterObject converts an Application's annotations or an
// ImageUpdater into our objects.
func convertImageUpdaterObject(obj map[string]any) ([]map[string]any, *fluxObject) {
	var h fluxHeader
	decode(obj, &h)
	c := &fluxObject{kind: h.Kind}
	if h.Metadata != nil {
		c.name, c.namespace = h.Metadata.Name, h.Metadata.Namespace
	}
	c.label = c.kind + " " + c.name
	if c.namespace != "" {
		c.label = c.kind + " " + c.namespace + "/" + c.name
	}
	var targets []updaterTarget
	if c.kind == "Application" {
		targets = c.fromAnnotations(obj)
	} else {
		targets = c.fromImageUpdater(obj)
	}
	if len(c.problems) > 0 {
		return nil, c
	}
	var out []map[string]any
	used := map[string]bool{}
	for _, t := range targets {
		out = append(out, c.updaterObjects(t, used)...)
	}
	for _, o := range out {
		kind, _ := o["kind"].(string)
		if err := fitsOurAPI(kind, o); err != nil {
			c.failf("spec", "the converted %s does not fit image-toolkit's (a bug in migrate): %v", kind, err)
		}
	}
	return out, c
}

// fromAnnotations reads a v0.x Application: its image-list and the keys
// beside it, general ones and <alias>.<key> ones.
func (c *fluxObject) fromAnnotations(obj map[string]any) []updaterTarget {
	md, _ := obj["metadata"].(map[string]any)
	ann := map[string]string{}
	if a, ok := md["annotations"].(map[string]any); ok {
		for k, v := range a {
			if s, ok := v.(string); ok && strings.HasPrefix(k, imageUpdaterPrefix) {
				ann[strings.TrimPrefix(k, imageUpdaterPrefix)] = s
			}
		}
	}
	field := func(key string) string { return "metadata.annotations." + imageUpdaterPrefix + key }
	used := map[string]bool{"image-list": true}
	get := func(key string) string { used[key] = true; return ann[key] }
	list := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	settings := func(prefix string, base updaterSettings) updaterSettings {
		if v := get(prefix + "update-strategy"); v != "" {
			base.strategy = v
		}
		if v := get(prefix + "allow-tags"); v != "" {
			base.allowTags = v
		}
		if v := get(prefix + "ignore-tags"); v != "" {
			base.ignoreTags = list(v)
		}
		if v := get(prefix + "pull-secret"); v != "" {
			base.pullSecret = v
		}
		if v := get(prefix + "platforms"); v != "" {
			base.platforms = list(v)
		}
		if v := get(prefix + "force-update"); v != "" {
			base.force = v == "true"
		}
		return base
	}
	common := settings("", updaterSettings{})
	t := updaterTarget{name: c.name, namespace: c.namespace, application: c.name, field: field("write-back-method")}
	t.writeBack = writeBack{method: get("write-back-method"), branch: get("git-branch"), target: get("write-back-target"),
		repository: get("git-repository")}
	if wb := get("git-write-branch"); wb != "" {
		c.warnf(field("git-write-branch"), "%q dropped: a templated write branch has no equivalent; spec.git.push.branch pushes to a fixed branch, spec.git.push.pullRequest proposes each change", wb)
	}
	spec, _ := obj["spec"].(map[string]any)
	if src, ok := spec["source"].(map[string]any); ok {
		t.appPath, _ = src["path"].(string)
		rev, _ := src["targetRevision"].(string)
		base, _, _ := strings.Cut(t.writeBack.branch, ":")
		if _, ok, why := gitsource.RevisionBranch(rev); base == "" && !ok {
			c.warnf("spec.source.targetRevision", "%q %s: the automation stalls (TargetRevisionNotBranch) until spec.git.checkout.ref.branch names the branch to write", rev, why)
		}
	}
	for _, entry := range list(ann["image-list"]) {
		alias, image, named := strings.Cut(entry, "=")
		if !named {
			alias, image = "", entry
		}
		img := updaterImage{alias: alias, image: image, field: field("image-list")}
		p := ""
		if alias != "" {
			p = alias + "."
		}
		img.settings = settings(p, common)
		if alias != "" {
			img.helmName, img.helmTag, img.helmSpec = get(p+"helm.image-name"), get(p+"helm.image-tag"), get(p+"helm.image-spec")
			img.kustomizeName = get(p + "kustomize.image-name")
		}
		t.images = append(t.images, img)
	}
	if len(t.images) == 0 {
		c.failf(field("image-list"), "names no image")
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range ann {
			if !yield(k) {
				return
			}
		}
	}) {
		if !used[k] {
			c.warnf(field(k), "dropped: not an annotation migrate knows (a misspelt key, or an alias not in image-list)")
		}
	}
	return []updaterTarget{t}
}

// fromImageUpdater reads a v1.x ImageUpdater: an automation per
// applicationRef.
func (c *fluxObject) fromImageUpdater(obj map[string]any) []updaterTarget {
	var doc fluxDocument[iuSpec]
	decode(obj, &doc)
	c.checked(&doc.fields)
	if doc.Metadata == nil || doc.Spec == nil {
		c.failf("spec", "is required")
		return nil
	}
	c.checked(&doc.Metadata.fields)
	spec := doc.Spec
	ns := c.namespace
	if spec.Namespace != "" && ns != "" && spec.Namespace != ns {
		c.warnf("spec.namespace", "%q: the automations are made in the ImageUpdater's namespace, %s, and select the Applications there", spec.Namespace, ns)
	} else if ns == "" {
		ns = spec.Namespace
	}
	if spec.UseAnnotations != nil {
		c.warnf("spec.useAnnotations", "dropped: convert the annotated Applications themselves (migrate reads their annotations)")
	}
	common := updaterSettings{}.with(spec.Common)
	wb := writeBack{}.with(spec.WriteBack)
	if len(spec.ApplicationRefs) == 0 {
		c.failf("spec.applicationRefs", "is required")
	}
	var targets []updaterTarget
	for i, ref := range spec.ApplicationRefs {
		p := fmt.Sprintf("spec.applicationRefs[%d]", i)
		t := updaterTarget{name: c.name, namespace: ns, writeBack: wb.with(ref.WriteBack), field: p + ".writeBackConfig"}
		if len(spec.ApplicationRefs) > 1 {
			t.name = fmt.Sprintf("%s-%d", c.name, i)
		}
		glob := strings.ContainsAny(ref.NamePattern, "*?[")
		switch {
		case ref.NamePattern == "":
			c.failf(p+".namePattern", "is required")
		case ref.LabelSelectors != nil:
			t.selector = c.labelSelector(ref.LabelSelectors)
			if ref.NamePattern != "*" {
				c.warnf(p+".namePattern", "%q dropped: image-toolkit selects Applications by label only, so every Application the labelSelectors match is written", ref.NamePattern)
			}
		case !glob:
			t.application = ref.NamePattern
		default:
			t.selector = map[string]any{"matchLabels": map[string]any{selectLabel: t.name}}
			c.warnf(p+".namePattern", "%q: image-toolkit selects Applications by label; label each Application it matches %s=%s", ref.NamePattern, selectLabel, t.name)
		}
		if ref.UseAnnotations {
			c.warnf(p+".useAnnotations", "dropped: convert the annotated Applications themselves (migrate reads their annotations)")
		}
		settings := common.with(ref.Common)
		for j, im := range ref.Images {
			ip := fmt.Sprintf("%s.images[%d]", p, j)
			img := updaterImage{alias: im.Alias, image: im.ImageName, field: ip + ".imageName", settings: settings.with(im.Common)}
			if tg := im.Targets; tg != nil {
				if h := tg.Helm; h != nil {
					img.helmName, img.helmTag, img.helmSpec = h.Name, h.Tag, h.Spec
					c.done(&h.fields)
				}
				if k := tg.Kustomize; k != nil {
					img.kustomizeName = k.Name
					c.done(&k.fields)
				}
				c.done(&tg.fields)
			}
			if im.Common != nil {
				c.done(&im.Common.fields)
			}
			c.done(&im.fields)
			t.images = append(t.images, img)
		}
		if len(t.images) == 0 {
			c.failf(p+".images", "is required")
		}
		if ref.Common != nil {
			c.done(&ref.Common.fields)
		}
		c.doneWriteBack(ref.WriteBack)
		c.done(&ref.fields)
		targets = append(targets, t)
	}
	if spec.Common != nil {
		c.done(&spec.Common.fields)
	}
	c.doneWriteBack(spec.WriteBack)
	c.done(&spec.fields)
	return targets
}

func (c *fluxObject) doneWriteBack(wb *iuWriteBack) {
	if wb == nil {
		return
	}
	if wb.Git != nil {
		c.done(&wb.Git.fields)
	}
	c.done(&wb.fields)
}

// updaterObjects are the ImageRepositories and ImagePolicies of t's images
// and its automation. used holds the names taken so far.
func (c *fluxObject) updaterObjects(t updaterTarget, used map[string]bool) []map[string]any {
	var out []map[string]any
	var argoImages []any
	for i, img := range t.images {
		name := objectName(t.name, img.alias, i, used)
		repo, pol := c.imageObjects(t, img, name)
		if repo == nil {
			continue
		}
		out = append(out, repo, pol)
		entry := map[string]any{"policy": name}
		setString(entry, "kustomizeName", img.kustomizeName)
		setString(entry, "helmImageName", img.helmName)
		setString(entry, "helmImageTag", img.helmTag)
		setString(entry, "helmImageSpec", img.helmSpec)
		// A forced image is written whether or not the Application runs
		// it, as image-updater's force-update does.
		setBool(entry, "force", img.settings.force)
		if len(entry) > 1 {
			argoImages = append(argoImages, entry)
		}
	}
	a := c.automation(t, argoImages)
	return append(out, a)
}

var invalidNameChars = regexp.MustCompile(`[^a-z0-9.-]+`)

// objectName is <target>-<alias> (or -<n> without an alias), made a valid
// object name and unique among used.
func objectName(target, alias string, i int, used map[string]bool) string {
	suffix := alias
	if suffix == "" {
		suffix = fmt.Sprint(i)
	}
	base := strings.Trim(invalidNameChars.ReplaceAllString(strings.ToLower(target+"-"+suffix), "-"), "-.")
	if len(base) > validation.DNS1123SubdomainMaxLength-4 {
		base = base[:validation.DNS1123SubdomainMaxLength-4]
	}
	name := base
	for n := 2; used[name]; n++ {
		name = fmt.Sprintf("%s-%d", base, n)
	}
	used[name] = true
	return name
}

// imageObjects are the ImageRepository and ImagePolicy of one image.
func (c *fluxObject) imageObjects(t updaterTarget, img updaterImage, name string) (repo, pol map[string]any) {
	image, constraint := splitConstraint(img.image)
	if image == "" {
		c.failf(img.field, "%q names no image", img.image)
		return nil, nil
	}
	meta := func() map[string]any {
		m := map[string]any{"name": name, "labels": map[string]any{migratedLabel: t.name}}
		setString(m, "namespace", t.namespace)
		return m
	}
	rs := map[string]any{"image": image, "interval": imageUpdaterInterval}
	s := img.settings
	if len(s.ignoreTags) > 0 {
		// The default exclusion (signatures) stays.
		list := []any{`^.*\.sig$`}
		for _, g := range s.ignoreTags {
			list = append(list, globRegexp(g))
		}
		rs["exclusionList"] = list
	}
	switch ps := s.pullSecret; {
	case ps == "":
	case strings.HasPrefix(ps, "pullsecret:"):
		ns, secret, ok := strings.Cut(strings.TrimPrefix(ps, "pullsecret:"), "/")
		if !ok {
			ns, secret = t.namespace, ns
		}
		rs["secretRef"] = map[string]any{"name": secret}
		if ns != t.namespace {
			c.warnf(img.field, "%q: pull secret %s/%s: an ImageRepository reads its Secret in its own namespace, %s; copy it there", img.image, ns, secret, t.namespace)
		}
	default:
		c.warnf(img.field, "%q: pull secret %q dropped: only pullsecret:<namespace>/<name> (a docker-registry Secret) maps to spec.secretRef; make one from it", img.image, ps)
	}
	ps := map[string]any{"imageRepositoryRef": map[string]any{"name": name}}
	switch strategy := cmp.Or(s.strategy, "semver"); strategy {
	case "semver":
		ps["policy"] = map[string]any{"semver": map[string]any{"range": cmp.Or(constraint, "*")}}
	case "newest-build", "latest":
		ps["policy"] = map[string]any{"newestBuild": map[string]any{}}
	case "alphabetical", "name":
		ps["policy"] = map[string]any{"alphabetical": map[string]any{}}
	case "digest":
		if constraint == "" {
			c.failf(img.field, "%q: strategy digest follows one tag, which the image must name", img.image)
			return nil, nil
		}
		ps["policy"] = map[string]any{"alphabetical": map[string]any{}}
		ps["filterTags"] = map[string]any{"pattern": "^" + regexp.QuoteMeta(constraint) + "$"}
		ps["digestReflectionPolicy"] = "Always"
		ps["interval"] = imageUpdaterInterval
	default:
		c.failf(img.field, "update strategy %q is not one image-updater has (semver, newest-build, alphabetical, digest)", strategy)
		return nil, nil
	}
	if constraint != "" && s.strategy != "" && s.strategy != "semver" && s.strategy != "digest" {
		c.warnf(img.field, "%q: the version constraint is only read by strategy semver, as by image-updater; dropped", img.image)
	}
	switch at := s.allowTags; {
	case at == "" || at == "any":
	case strings.HasPrefix(at, "regexp:"):
		if _, ok := ps["filterTags"]; ok {
			c.warnf(img.field, "%q: allow-tags %q dropped: strategy digest follows its one tag", img.image, at)
			break
		}
		re := strings.TrimPrefix(at, "regexp:")
		if _, err := regexp.Compile(re); err != nil {
			c.warnf(img.field, "%q: allow-tags %q is not a Go regular expression: the ImagePolicy will be Stalled (InvalidPolicy)", img.image, at)
		}
		ps["filterTags"] = map[string]any{"pattern": re}
	default:
		c.warnf(img.field, "%q: allow-tags %q dropped: only regexp:<expression> and any are read", img.image, at)
	}
	switch len(s.platforms) {
	case 0:
	case 1:
		ps["platform"] = s.platforms[0]
	default:
		ps["platform"] = s.platforms[0]
		c.warnf(img.field, "%q: platforms %s: an ImagePolicy reads one platform (its digest and build time); %s kept", img.image, strings.Join(s.platforms, ","), s.platforms[0])
	}
	repo = map[string]any{"apiVersion": imagev1.GroupVersion.String(), "kind": imagev1.ImageRepositoryKind, "metadata": meta(), "spec": rs}
	pol = map[string]any{"apiVersion": imagev1.GroupVersion.String(), "kind": imagev1.ImagePolicyKind, "metadata": meta(), "spec": ps}
	return repo, pol
}

// automation is the ImageUpdateAutomation of t.
func (c *fluxObject) automation(t updaterTarget, argoImages []any) map[string]any {
	spec := map[string]any{
		"interval":       imageUpdaterInterval,
		"policySelector": map[string]any{"matchLabels": map[string]any{migratedLabel: t.name}},
	}
	if t.application != "" {
		spec["sourceRef"] = map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "name": t.application}
	} else {
		spec["applicationSelector"] = t.selector
	}
	git := map[string]any{"commit": map[string]any{"author": map[string]any{
		"name": "argocd-image-updater", "email": "noreply@argoproj.io"}}}
	spec["git"] = git
	wb := t.writeBack
	switch m := wb.method; {
	case m == "" || m == "argocd":
		c.warnf(t.field, "write-back method argocd sets the Application's parameters in the cluster; image-toolkit commits them to git instead, into the override file .argocd-source-<app>.yaml that Argo CD reads the same way (strategy ArgoCD): Argo CD must be able to read the commits, and image-toolkit to push them")
	case m == "git" || m == "git:repocreds":
	case strings.HasPrefix(m, "git:secret:"):
		c.warnf(t.field, "credentials %q dropped: image-toolkit pushes with Argo CD's repository Secret for the Application's repository; give that one write access, or label this Secret argocd.argoproj.io/secret-type: repository with the repository's url", strings.TrimPrefix(m, "git:"))
	default:
		c.failf(t.field, "write-back method %q is not argocd, git or git:<credentials>", m)
	}
	if wb.repository != "" {
		c.warnf(t.field, "git repository %q dropped: image-toolkit writes the Application's own git source (a Helm chart's values in another repository are not written)", wb.repository)
	}
	if b := wb.branch; b != "" {
		base, write, split := strings.Cut(b, ":")
		switch {
		case strings.Contains(b, "{{"):
			c.warnf(t.field, "branch %q dropped: a templated write branch has no equivalent; spec.git.push.pullRequest proposes each change on a branch of its own", b)
			if split && base != "" && !strings.Contains(base, "{{") {
				git["checkout"] = map[string]any{"ref": map[string]any{"branch": base}}
			}
		default:
			if base != "" {
				git["checkout"] = map[string]any{"ref": map[string]any{"branch": base}}
			}
			if split && write != "" {
				git["push"] = map[string]any{"branch": write}
			}
		}
	}
	update := map[string]any{"strategy": string(imagev1.UpdateStrategyArgoCD)}
	switch kind, target, _ := strings.Cut(wb.target, ":"); kind {
	case "":
	case "kustomization", "helmvalues":
		// image-updater edits that kustomization or values file; discovery
		// finds and sets the images of both, markers or not.
		update["strategy"] = string(imagev1.UpdateStrategySetters)
		spec["discover"] = map[string]any{}
		dir := target
		if kind == "helmvalues" && target != "" {
			dir = path.Dir(target)
		}
		if p := c.targetPath(t, dir); p != "" {
			update["path"] = p
		}
		c.warnf(t.field, "write-back target %q: strategy Setters with spec.discover, which finds and sets the images of the %s under the update path (docs/discovery.md)", wb.target,
			map[string]string{"kustomization": "kustomizations", "helmvalues": "Helm values files"}[kind])
	default:
		c.failf(t.field, "write-back target %q is not kustomization[:<path>] or helmvalues[:<file>]", wb.target)
	}
	if len(argoImages) > 0 && update["strategy"] == string(imagev1.UpdateStrategyArgoCD) {
		update["argoCD"] = map[string]any{"images": argoImages}
	}
	spec["update"] = update
	meta := map[string]any{"name": strings.Trim(invalidNameChars.ReplaceAllString(strings.ToLower(t.name), "-"), "-.")}
	setString(meta, "namespace", t.namespace)
	return map[string]any{"apiVersion": imagev1.GroupVersion.String(), "kind": imagev1.ImageUpdateAutomationKind, "metadata": meta, "spec": spec}
}

// targetPath is a write-back target's directory in the repository: from
// the root when absolute, else from the Application's path; "" (with a
// warning) when relative and the path is unknown.
func (c *fluxObject) targetPath(t updaterTarget, dir string) string {
	switch {
	case dir == "" || dir == ".":
		return cleanRel(t.appPath)
	case strings.HasPrefix(dir, "/"):
		return cleanRel(dir)
	case t.appPath == "":
		c.warnf(t.field, "write-back target path %q is relative to the Application's path, which the ImageUpdater does not say: spec.update.path left unset (the Applications' path); set it to the path from the repository root", dir)
		return ""
	}
	return cleanRel(path.Join(t.appPath, dir))
}

func cleanRel(p string) string {
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	if p == "." {
		return ""
	}
	return p
}

// splitConstraint splits image-updater's name[:constraint] at the tag
// separator: the last ':' after the last '/', so a registry port stays.
func splitConstraint(s string) (image, constraint string) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || i < strings.LastIndexByte(s, '/') {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// globRegexp is the regular expression of a glob pattern, as
// image-updater's ignore-tags match tags whole.
func globRegexp(g string) string {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range g {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return b.String()
}
