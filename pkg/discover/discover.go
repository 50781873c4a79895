// Package discover finds the image references in a directory of YAML files
// and Dockerfiles: the images a repository deploys or builds on, each with
// every place it is written.
// The CLI (`tk-image discover`) and the automation controller read a
// repository through it, so both find the same images in the same places.
//
// The design, and why:
//
//   - Images are found by where Kubernetes and its tools read them, never
//     by what a string looks like: the image of a container in a pod
//     template (any kind with the shape: Deployment, CronJob, a Knative
//     Service, an Argo Rollout), a kustomization's images entry, and the
//     image.repository/image.tag convention of Helm values, a Dockerfile's
//     FROM and COPY --from. A string that looks like an image in a
//     ConfigMap, an env value, an annotation or a .env file is never one.
//   - A reference that cannot be automated as it stands (no tag, latest, a
//     digest alone, a template expression) is reported as skipped with the
//     reason, not guessed at; a file that does not parse is reported and
//     the others go on.
//   - Each location is a file, a line, a field path and the part of the
//     image the field holds (all of it, or the name, tag or digest for
//     split fields), which is what a setter marker says: writing the
//     markers, or updating without them, is pkg/setters' byte-exact work.
//   - One image written in many files is one entry with all its
//     locations, named canonically (busybox is docker.io/library/busybox),
//     so it is scanned once however many files name it.
package discover

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/imagename"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// Annotations a workload may carry, as Flux v1's did.
const (
	// AutomatedAnnotation "false" opts a workload's images out.
	AutomatedAnnotation = "image.toolkit.dev/automated"
	// PolicyAnnotationPrefix + a container's name gives that container's
	// policy, e.g. image.toolkit.dev/policy.app: semver:~1.4.
	PolicyAnnotationPrefix = "image.toolkit.dev/policy."
)

// Location is one place an image is written.
type Location struct {
	File string `json:"file"`
	Line int    `json:"line"`
	// Column is the value's column (1-based), which with Line names the
	// YAML node for the setters.
	Column int `json:"column"`
	// Path is the field path, e.g. spec.template.spec.containers[app].image.
	Path string `json:"path"`
	// Field is the part of the image the field holds: "" the whole
	// reference, or name, tag, digest.
	Field setters.Field `json:"field,omitempty"`
	// Value is the field's value as written.
	Value string `json:"value"`
	// Object is the Kubernetes object the field belongs to.
	Object meta.ObjectID `json:"object"`
	// Policy is the policy a workload annotation sets for its container
	// (e.g. semver:~1.4), empty when none.
	Policy string `json:"policy,omitempty"`
}

// Image is a distinct image and where it is written. Its value is the one
// most of its locations have (the first such in file order on a tie), with
// the name canonical: docker.io/library/busybox for busybox; a registry's
// port is kept.
type Image struct {
	meta.ImageRef `json:",inline"`
	Locations     []Location `json:"locations"`
}

// Summary is the image as a status records it: its value, how many places
// write it, the first files (in path order), and the policy the first
// workload annotation sets; policy names the ImagePolicy that sets it.
func (img Image) Summary(policy string) meta.DiscoveredImage {
	out := meta.DiscoveredImage{ImageRef: img.ImageRef, Locations: len(img.Locations), Policy: policy}
	for _, l := range img.Locations {
		if out.PolicyAnnotation == "" {
			out.PolicyAnnotation = l.Policy
		}
		if n := len(out.Files); n < meta.MaxListedFiles && (n == 0 || out.Files[n-1] != l.File) {
			out.Files = append(out.Files, l.File)
		}
	}
	return out
}

// Skipped is a reference, or a file, not automated, and why.
type Skipped struct {
	File   string `json:"file"`
	Line   int    `json:"line,omitempty"`
	Value  string `json:"value,omitempty"`
	Reason string `json:"reason"`
}

// Result is what a directory holds.
type Result struct {
	Images  []Image   `json:"images"`
	Skipped []Skipped `json:"skipped"`
}

// Reasons a reference is skipped.
const (
	ReasonNoTag        = "no tag: nothing to compare a new tag with"
	ReasonLatest       = "latest: not a version"
	ReasonDigestOnly   = "digest only: no tag to follow"
	ReasonTemplate     = "template expression"
	ReasonHelmTemplate = "Helm template: rendered by Helm, not written as YAML"
	ReasonOptedOut     = AutomatedAnnotation + ` is "false"`
	ReasonInvalid      = "not an image reference"
	ReasonNoTagField   = "kustomization image without newTag: no field to update"
	ReasonParse        = "does not parse as YAML"
	ReasonDockerfile   = "does not parse as a Dockerfile"
	ReasonFormat       = "does not parse as its format (HCL, TOML, .env or JSON)"
	ReasonBuildArg     = "build argument: set when the image is built"
	ReasonUnreadable   = "cannot be read"
)

// Dir discovers the images in the YAML files and Dockerfiles under dir (as
// setters.UpdateDir walks them: .git left out, symlinks followed only
// inside dir).
func Dir(dir string) (*Result, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	files, problems, err := setters.DiscoverFiles(root)
	if err != nil {
		return nil, err
	}
	exists := func(p string) bool {
		info, err := root.Stat(p)
		return err == nil && info.Mode().IsRegular()
	}
	d := newDiscoverer(exists)
	for _, p := range problems {
		d.skip(Skipped{File: p.Path, Reason: p.Err.Error()})
	}
	slices.Sort(files)
	// Files are read and parsed in parallel, each into its own
	// discoverer, and merged in file order, so the result is the same
	// however the work was shared.
	parts := make([]*discoverer, len(files))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0)*2, max(len(files), 1)) {
		wg.Go(func() {
			for i := range next {
				part := newDiscoverer(exists)
				if data, err := root.ReadFile(files[i]); err != nil {
					part.skip(Skipped{File: files[i], Reason: ReasonUnreadable})
				} else {
					part.file(files[i], data)
				}
				parts[i] = part
			}
		})
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, part := range parts {
		d.merge(part)
	}
	return d.result(), nil
}

func newDiscoverer(exists func(string) bool) *discoverer {
	return &discoverer{byName: map[string]*Image{}, refs: map[string][]parsed{}, exists: exists}
}

// merge adds what another discoverer found after what d found.
func (d *discoverer) merge(o *discoverer) {
	for _, n := range o.order {
		img, ok := d.byName[n]
		if !ok {
			img = &Image{ImageRef: meta.ImageRef{Name: n}}
			d.byName[n] = img
			d.order = append(d.order, n)
		}
		img.Locations = append(img.Locations, o.byName[n].Locations...)
		d.refs[n] = append(d.refs[n], o.refs[n]...)
	}
	d.skipped = append(d.skipped, o.skipped...)
}

// Bytes discovers the images of one file's content, named file.
func Bytes(file string, data []byte) *Result {
	d := newDiscoverer(nil)
	d.file(file, data)
	return d.result()
}

type discoverer struct {
	// exists says whether a file is in the directory read (nil: none).
	exists  func(string) bool
	byName  map[string]*Image
	refs    map[string][]parsed
	order   []string
	skipped []Skipped
}

func (d *discoverer) skip(s Skipped) { d.skipped = append(d.skipped, s) }

// file reads one file's documents.
func (d *discoverer) file(file string, data []byte) {
	if setters.IsDockerfile(file) {
		d.dockerfile(file, data)
		return
	}
	if f := setters.FormatOf(file); f != nil && f.Values != nil {
		d.values(file, f, data)
		return
	}
	if d.isHelmTemplate(file) {
		d.skip(Skipped{File: file, Reason: ReasonHelmTemplate})
		return
	}
	docs, err := setters.ParseDocuments(data)
	if err != nil {
		d.skip(Skipped{File: file, Reason: ReasonParse + ": " + firstLine(err.Error())})
		return
	}
	for _, doc := range docs {
		if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		d.object(file, doc.Content[0], "")
	}
}

// object reads one object (or a List's items).
func (d *discoverer) object(file string, obj *yaml.Node, prefix string) {
	kind := scalar(obj, "kind")
	id := meta.ObjectID{APIVersion: scalar(obj, "apiVersion"), Kind: kind,
		Namespace: scalar(get(obj, "metadata"), "namespace"), Name: scalar(get(obj, "metadata"), "name")}
	at := func(p string) string { return join(prefix, p) }
	switch {
	case kind == "List" || strings.HasSuffix(kind, "List") && get(obj, "items") != nil:
		if items := get(obj, "items"); items != nil && items.Kind == yaml.SequenceNode {
			for i, it := range items.Content {
				if it.Kind == yaml.MappingNode {
					d.object(file, it, at(fmt.Sprintf("items[%d]", i)))
				}
			}
		}
	case kind == "Kustomization" || isKustomizationFile(file):
		d.kustomization(file, obj, id, prefix)
	case kind == "HelmRelease":
		if v := get(get(obj, "spec"), "values"); v != nil {
			d.helmValues(file, v, id, at("spec.values"))
		}
	case kind == "" && isValuesFile(file):
		d.helmValues(file, obj, id, prefix)
	default:
		d.workload(file, obj, id, prefix)
	}
}

// podSpecPaths are where objects keep a pod spec: a Pod's spec, a pod
// template's, a CronJob's job template's; any kind with these shapes
// (Knative Services, Argo Rollouts) is read the same.
var podSpecPaths = [][]string{
	{"spec", "template", "spec"},
	{"spec", "jobTemplate", "spec", "template", "spec"},
	{"template", "spec"}, // PodTemplate
}

var containerLists = []string{"initContainers", "containers", "ephemeralContainers"}

// workload reads the containers' images of an object with a pod spec.
func (d *discoverer) workload(file string, obj *yaml.Node, id meta.ObjectID, prefix string) {
	annotations := get(get(obj, "metadata"), "annotations")
	optedOut := scalar(annotations, AutomatedAnnotation) == "false"
	paths := podSpecPaths
	if id.Kind == "Pod" {
		paths = [][]string{{"spec"}}
	}
	for _, p := range paths {
		spec := obj
		for _, k := range p {
			spec = get(spec, k)
		}
		if spec == nil || spec.Kind != yaml.MappingNode {
			continue
		}
		for _, list := range containerLists {
			cs := get(spec, list)
			if cs == nil || cs.Kind != yaml.SequenceNode {
				continue
			}
			for i, c := range cs.Content {
				img := get(c, "image")
				if img == nil || img.Kind != yaml.ScalarNode {
					continue
				}
				cname := scalar(c, "name")
				step := fmt.Sprintf("%s[%d]", list, i)
				if cname != "" {
					step = fmt.Sprintf("%s[%s]", list, cname)
				}
				loc := Location{File: file, Line: img.Line, Column: img.Column, Value: img.Value, Object: id,
					Path: join(prefix, strings.Join(p, ".")+"."+step+".image")}
				if optedOut {
					d.skip(Skipped{File: file, Line: img.Line, Value: img.Value, Reason: ReasonOptedOut})
					continue
				}
				if cname != "" {
					loc.Policy = scalar(annotations, PolicyAnnotationPrefix+cname)
				}
				d.reference(loc)
			}
		}
	}
}

// kustomization reads a kustomization's images entries: name is the
// placeholder the bases use; newName, newTag and digest are what is set.
func (d *discoverer) kustomization(file string, obj *yaml.Node, id meta.ObjectID, prefix string) {
	images := get(obj, "images")
	if images == nil || images.Kind != yaml.SequenceNode {
		return
	}
	for i, e := range images.Content {
		if e.Kind != yaml.MappingNode {
			continue
		}
		placeholder, newName, newTag, digest := get(e, "name"), get(e, "newName"), get(e, "newTag"), get(e, "digest")
		nameNode := newName
		if nameNode == nil {
			nameNode = placeholder
		}
		if nameNode == nil || nameNode.Kind != yaml.ScalarNode {
			continue
		}
		base := join(prefix, fmt.Sprintf("images[%d]", i))
		if newTag == nil || newTag.Kind != yaml.ScalarNode {
			line := nameNode.Line
			if digest != nil {
				d.skip(Skipped{File: file, Line: line, Value: nameNode.Value + "@" + digest.Value, Reason: ReasonDigestOnly})
			} else {
				d.skip(Skipped{File: file, Line: line, Value: nameNode.Value, Reason: ReasonNoTagField})
			}
			continue
		}
		ref := nameNode.Value + ":" + newTag.Value
		if digest != nil && digest.Kind == yaml.ScalarNode {
			ref += "@" + digest.Value
		}
		locs := []Location{{File: file, Line: newTag.Line, Column: newTag.Column, Path: base + ".newTag",
			Field: setters.FieldTag, Value: newTag.Value, Object: id}}
		if newName != nil && newName.Kind == yaml.ScalarNode {
			locs = append(locs, Location{File: file, Line: newName.Line, Column: newName.Column, Path: base + ".newName",
				Field: setters.FieldName, Value: newName.Value, Object: id})
		}
		if digest != nil && digest.Kind == yaml.ScalarNode {
			locs = append(locs, Location{File: file, Line: digest.Line, Column: digest.Column, Path: base + ".digest",
				Field: setters.FieldDigest, Value: digest.Value, Object: id})
		}
		d.split(file, ref, newTag.Line, locs)
	}
}

// helmValues reads the image.repository + image.tag (+ image.registry)
// convention of Helm values, at any depth: a mapping named image (or
// ending in Image, as sidecarImage) with a repository and a tag.
func (d *discoverer) helmValues(file string, n *yaml.Node, id meta.ObjectID, at string) {
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		p := join(at, key.Value)
		if val.Kind != yaml.MappingNode {
			continue
		}
		if key.Value == "image" || strings.HasSuffix(key.Value, "Image") {
			if d.helmImage(file, val, id, p) {
				continue
			}
		}
		d.helmValues(file, val, id, p)
	}
}

// helmImage reads one image mapping; false when it is not one.
func (d *discoverer) helmImage(file string, m *yaml.Node, id meta.ObjectID, at string) bool {
	repo, tag, registry := get(m, "repository"), get(m, "tag"), get(m, "registry")
	if repo == nil || repo.Kind != yaml.ScalarNode {
		return false
	}
	ref := repo.Value
	if registry != nil && registry.Kind == yaml.ScalarNode && registry.Value != "" {
		ref = registry.Value + "/" + ref
	}
	if tag == nil || tag.Kind != yaml.ScalarNode || tag.Value == "" {
		d.skip(Skipped{File: file, Line: repo.Line, Value: ref, Reason: ReasonNoTag})
		return true
	}
	locs := []Location{{File: file, Line: tag.Line, Column: tag.Column, Path: at + ".tag", Field: setters.FieldTag, Value: tag.Value, Object: id}}
	if registry == nil {
		// With a registry field the repository is not the whole name, and
		// a name setter would write the registry into it.
		locs = append(locs, Location{File: file, Line: repo.Line, Column: repo.Column, Path: at + ".repository",
			Field: setters.FieldName, Value: repo.Value, Object: id})
	}
	d.split(file, ref+":"+tag.Value, tag.Line, locs)
	return true
}

// split records an image written across fields, from its reassembled
// reference.
func (d *discoverer) split(file, ref string, line int, locs []Location) {
	img, reason := parse(ref)
	if reason != "" {
		d.skip(Skipped{File: file, Line: line, Value: ref, Reason: reason})
		return
	}
	d.add(img, locs...)
}

// reference records an image written whole in one field.
func (d *discoverer) reference(loc Location) {
	img, reason := parse(loc.Value)
	if reason != "" {
		d.skip(Skipped{File: loc.File, Line: loc.Line, Value: loc.Value, Reason: reason})
		return
	}
	d.add(img, loc)
}

type parsed struct{ name, tag, digest string }

// parse reads a reference, or says why it cannot be automated.
func parse(ref string) (parsed, string) {
	if strings.Contains(ref, "{{") || strings.Contains(ref, "${") {
		return parsed{}, ReasonTemplate
	}
	r, err := name.ParseReference(ref, name.WithDefaultTag(""))
	if err != nil {
		return parsed{}, ReasonInvalid
	}
	p := parsed{name: imagename.Canonical(r.Context())}
	switch v := r.(type) {
	case name.Tag:
		p.tag = v.TagStr()
	case name.Digest:
		p.digest = v.DigestStr()
		// A tag before the digest (name:tag@sha256:...) is kept by
		// go-containerregistry only in the string.
		if at := strings.LastIndexByte(ref, '@'); at >= 0 {
			if t, err := name.NewTag(ref[:at], name.WithDefaultTag("")); err == nil {
				p.tag = t.TagStr()
			}
		}
	}
	switch {
	case p.tag == "" && p.digest != "":
		return parsed{}, ReasonDigestOnly
	case p.tag == "":
		return parsed{}, ReasonNoTag
	case p.tag == "latest":
		return parsed{}, ReasonLatest
	}
	return p, ""
}

func (d *discoverer) add(p parsed, locs ...Location) {
	img, ok := d.byName[p.name]
	if !ok {
		img = &Image{ImageRef: meta.ImageRef{Name: p.name}}
		d.byName[p.name] = img
		d.order = append(d.order, p.name)
	}
	img.Locations = append(img.Locations, locs...)
	d.refs[p.name] = append(d.refs[p.name], p)
}

// result sorts the images by name, their locations by file and line, and
// gives each the tag (and digest) most of its references have.
func (d *discoverer) result() *Result {
	res := &Result{Images: []Image{}, Skipped: d.skipped}
	if res.Skipped == nil {
		res.Skipped = []Skipped{}
	}
	for _, n := range d.order {
		img := d.byName[n]
		img.Tag = mostCommon(d.refs[n], func(p parsed) string { return p.tag })
		img.Digest = mostCommon(d.refs[n], func(p parsed) string { return p.digest })
		slices.SortStableFunc(img.Locations, func(a, b Location) int {
			return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
		res.Images = append(res.Images, *img)
	}
	slices.SortFunc(res.Images, func(a, b Image) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortStableFunc(res.Skipped, func(a, b Skipped) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	return res
}

// mostCommon is the value of f most of ps have, the first on a tie.
func mostCommon(ps []parsed, f func(parsed) string) string {
	count := map[string]int{}
	best, n := "", 0
	for _, p := range ps {
		v := f(p)
		count[v]++
		if count[v] > n {
			best, n = v, count[v]
		}
	}
	return best
}

// get is the value of key in a mapping node, nil when absent.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// scalar is the string value of key in a mapping node, "" when absent or
// not a scalar.
func scalar(m *yaml.Node, key string) string {
	n := get(m, key)
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func join(prefix, p string) string {
	if prefix == "" {
		return p
	}
	return prefix + "." + p
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// isKustomizationFile: kustomize reads these names as kustomizations
// whether or not they say their kind.
func isKustomizationFile(file string) bool {
	switch path.Base(file) {
	case "kustomization.yaml", "kustomization.yml", "Kustomization":
		return true
	}
	return false
}

// isValuesFile: a Helm chart's values.yaml, or values files named as
// they usually are (values-prod.yaml, prod.values.yaml).
func isValuesFile(file string) bool {
	b := strings.TrimSuffix(strings.TrimSuffix(path.Base(file), ".yaml"), ".yml")
	return b == "values" || strings.HasPrefix(b, "values-") || strings.HasPrefix(b, "values.") || strings.HasSuffix(b, ".values") || strings.HasSuffix(b, "-values")
}

// isHelmTemplate: a file in a chart's templates directory is Go template
// source, not YAML.
func (d *discoverer) isHelmTemplate(file string) bool {
	dir := path.Dir(file)
	return path.Base(dir) == "templates" && d.exists != nil && d.exists(path.Join(path.Dir(dir), "Chart.yaml"))
}

// MayHaveImages reports whether a file could hold an image Dir finds:
// every such YAML field's key, or its parent's, contains "image" or
// "Image", and a Dockerfile's images follow FROM or --from. A checkout for
// discovery may leave the other files out.
func MayHaveImages(data []byte) bool {
	for _, w := range []string{"image", "Image", "IMAGE", "FROM", "from"} {
		if bytes.Contains(data, []byte(w)) {
			return true
		}
	}
	return false
}

// Filter keeps the images whose names match an include pattern (all when
// there is none) and no exclude pattern; patterns are path.Match globs, so
// * stays within a path segment (ghcr.io/acme/*). A pattern that does not
// compile matches nothing.
func Filter(images []Image, include, exclude []string) []Image {
	match := func(patterns []string, n string) bool {
		for _, p := range patterns {
			if ok, err := path.Match(p, n); err == nil && ok {
				return true
			}
		}
		return false
	}
	var out []Image
	for _, img := range images {
		if (len(include) == 0 || match(include, img.Name)) && !match(exclude, img.Name) {
			out = append(out, img)
		}
	}
	return out
}
