// Package migrate converts Flux's image automation objects (ImageRepository,
// ImagePolicy and ImageUpdateAutomation of image.toolkit.fluxcd.io v1,
// v1beta2 and v1beta1) into image-toolkit's, document by document, keeping
// every other document of the input as written so that a whole directory
// can be piped through.
//
// A conversion never guesses silently: a field image-toolkit treats
// differently is adjusted with a warning naming the object and the field, a
// field it lacks is dropped with one, and an object that cannot work is a
// problem that stops the whole migration. The converted object is decoded
// strictly into our Go types before it is written, so no field our API
// lacks is ever output. tk-image's migrate command is the front end.
package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	sigsyaml "sigs.k8s.io/yaml"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// FluxImageGroup is the API group of Flux's image automation kinds.
const FluxImageGroup = "image.toolkit.fluxcd.io"

// fluxImageVersions are the versions of Flux's image API migrate reads. Their
// fields are (nearly) nested supersets of each other, so one converter reads
// them all; v1alpha1 and v1alpha2 were shaped differently.
var fluxImageVersions = []string{"v1", "v1beta2", "v1beta1"}

// fluxImageKinds are the kinds migrate converts, with the resource names
// --from-cluster lists them by, in the order it lists them.
var fluxImageKinds = []struct{ kind, resource string }{
	{imagev1.ImageRepositoryKind, "imagerepositories"},
	{imagev1.ImagePolicyKind, "imagepolicies"},
	{imagev1.ImageUpdateAutomationKind, "imageupdateautomations"},
}

// Input is one file to read, or stdin.
type Input struct {
	Name  string // as messages show it
	Path  string // "" for stdin
	Stdin io.Reader
}

// Migration converts the input documents in order and remembers the output,
// printing warnings and failures on stderr as it goes.
type Migration struct {
	stderr        io.Writer
	onlyConverted bool
	docs          []migratedDoc
	converted     int
	failed        int
	// seen maps "Kind namespace/name" to where the object was read, to
	// warn when two inputs define the same object.
	seen map[string]string
}

// New returns a migration that reports on stderr and, with onlyConverted,
// leaves out the documents that are not Flux image objects.
func New(stderr io.Writer, onlyConverted bool) *Migration {
	return &Migration{stderr: stderr, onlyConverted: onlyConverted, seen: map[string]string{}}
}

// Converted is the number of objects converted.
func (m *Migration) Converted() int { return m.converted }

// Failed is the number of documents that could not be read or converted.
func (m *Migration) Failed() int { return m.failed }

// migratedDoc is one output document: text is a YAML document written
// out as it was read; otherwise value is marshalled.
type migratedDoc struct {
	text  []byte
	value any
}

// docLocation says where a document came from, for messages.
type docLocation struct {
	input string
	doc   int // 1-based
	line  int // where the document starts, 0 when unknown
	item  int // 1-based index in a List, 0 when not in one
}

func (l docLocation) String() string {
	if l.input == "" {
		return "the cluster"
	}
	s := fmt.Sprintf("%s: document %d", l.input, l.doc)
	if l.line > 0 {
		s += fmt.Sprintf(" (line %d)", l.line)
	}
	if l.item > 0 {
		s += fmt.Sprintf(", item %d", l.item)
	}
	return s
}

func (m *Migration) fail(loc docLocation, format string, args ...any) {
	m.failed++
	m.report(loc, format, args...)
}

func (m *Migration) report(loc docLocation, format string, args ...any) {
	fmt.Fprintf(m.stderr, "tk-image: %s: %s\n", loc, fmt.Sprintf(format, args...))
}

// Read reads one file (or stdin) as a stream of YAML documents, or of
// JSON values when it starts with '{'.
func (m *Migration) Read(in Input) {
	var data []byte
	var err error
	if in.Stdin != nil {
		data, err = io.ReadAll(in.Stdin)
	} else {
		data, err = os.ReadFile(in.Path)
	}
	if err != nil {
		m.failed++
		fmt.Fprintf(m.stderr, "tk-image: %s: %v\n", in.Name, err)
		return
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(data))
		for n := 1; ; n++ {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err == io.EOF {
				return
			} else if err != nil {
				// The decoder cannot resynchronise after a syntax error.
				m.fail(docLocation{input: in.Name, doc: n}, "not valid JSON: %v", err)
				return
			}
			m.document(docLocation{input: in.Name, doc: n}, nil, raw)
		}
	}
	for n, d := range migSplitYAML(data) {
		loc := docLocation{input: in.Name, doc: n + 1, line: d.line}
		j, err := sigsyaml.YAMLToJSON(d.text)
		if err != nil {
			m.fail(loc, "not valid YAML: %v", err)
			continue
		}
		m.document(loc, d.text, j)
	}
}

// migYAMLDoc is one document of a YAML stream and the line it starts on.
type migYAMLDoc struct {
	text []byte
	line int
}

// migSplitYAML splits a YAML stream at its "---" lines, keeping each
// document's text as written (comments included) and where it starts, for
// messages. Text after "---" on the same line starts the next document.
func migSplitYAML(data []byte) []migYAMLDoc {
	var docs []migYAMLDoc
	var cur []byte
	start := 0 // the line of the first non-blank line of cur
	flush := func() {
		if start > 0 {
			docs = append(docs, migYAMLDoc{text: cur, line: start})
		}
		cur, start = nil, 0
	}
	for i, l := range bytes.SplitAfter(data, []byte("\n")) {
		content := bytes.TrimRight(l, "\r\n")
		if bytes.Equal(content, []byte("---")) || bytes.HasPrefix(content, []byte("--- ")) || bytes.HasPrefix(content, []byte("---\t")) {
			flush()
			if rest := bytes.TrimSpace(content[3:]); len(rest) > 0 && rest[0] != '#' {
				cur, start = append(rest, '\n'), i+1
			}
			continue
		}
		if start == 0 && len(bytes.TrimSpace(content)) > 0 {
			start = i + 1
		}
		cur = append(cur, l...)
	}
	flush()
	return docs
}

// document handles one document: text is its YAML as written (nil for
// JSON input), j the same as JSON.
func (m *Migration) document(loc docLocation, text []byte, j []byte) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(j))
	// Numbers of passed-through documents stay exact.
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		m.fail(loc, "not valid JSON: %v", err)
		return
	}
	if v == nil {
		return // empty, or only comments
	}
	obj, _ := v.(map[string]any)
	if items, ok := fluxListItems(obj); ok {
		listKind, _ := obj["kind"].(string)
		apiVersion, _ := obj["apiVersion"].(string)
		for i, item := range items {
			itemObj, isObj := item.(map[string]any)
			// Items of a typed list (ImagePolicyList) may leave their
			// apiVersion and kind to the list.
			if isObj && itemObj["kind"] == nil && strings.HasSuffix(listKind, "List") && listKind != "List" {
				itemObj["apiVersion"], itemObj["kind"] = apiVersion, strings.TrimSuffix(listKind, "List")
			}
			itemLoc := loc
			itemLoc.item = i + 1
			switch {
			case isObj && isFluxImage(itemObj):
				m.convert(itemLoc, itemObj)
			case isObj && isImageUpdaterConfig(itemObj):
				m.convertImageUpdater(itemLoc, nil, item, itemObj)
			default:
				m.passThrough(nil, item, itemObj)
			}
		}
		return
	}
	if obj != nil && isFluxImage(obj) {
		m.convert(loc, obj)
		return
	}
	if obj != nil && isImageUpdaterConfig(obj) {
		m.convertImageUpdater(loc, text, json.RawMessage(j), obj)
		return
	}
	if text != nil {
		m.passThrough(text, nil, obj)
	} else {
		m.passThrough(nil, json.RawMessage(j), obj)
	}
}

// fluxListItems returns the items of a List (v1 List, or a typed list such
// as ImagePolicyList) holding at least one Flux image object; a List with
// none is passed through whole, as written.
func fluxListItems(obj map[string]any) ([]any, bool) {
	kind, _ := obj["kind"].(string)
	items, ok := obj["items"].([]any)
	if !ok || !strings.HasSuffix(kind, "List") {
		return nil, false
	}
	apiVersion, _ := obj["apiVersion"].(string)
	if group, _, _ := strings.Cut(apiVersion, "/"); group == FluxImageGroup {
		return items, true
	}
	for _, it := range items {
		if o, ok := it.(map[string]any); ok && (isFluxImage(o) || isImageUpdaterConfig(o)) {
			return items, true
		}
	}
	return nil, false
}

func isFluxImage(obj map[string]any) bool {
	apiVersion, _ := obj["apiVersion"].(string)
	group, _, _ := strings.Cut(apiVersion, "/")
	return group == FluxImageGroup
}

func (m *Migration) passThrough(text []byte, value any, obj map[string]any) {
	if m.onlyConverted {
		return
	}
	m.docs = append(m.docs, migratedDoc{text: text, value: value})
}

// reported prints a conversion's warnings and problems, and says whether
// it converted (no problems).
func (m *Migration) reported(loc docLocation, c *fluxObject) bool {
	for _, w := range c.warnings {
		fmt.Fprintf(m.stderr, "warning: %s: %s\n", c.label, w)
	}
	if len(c.problems) == 0 {
		return true
	}
	m.failed++
	for _, p := range c.problems {
		m.report(loc, "%s: %s", c.label, p)
	}
	return false
}

// convert converts one Flux object and records it, or reports why it
// cannot be converted.
func (m *Migration) convert(loc docLocation, obj map[string]any) {
	out, c := convertFluxObject(obj)
	if !m.reported(loc, c) {
		return
	}
	m.record(loc, c.label, out)
}

// record writes a converted object, warning (on label, what it was made
// from) when an object of the same kind and name was written before.
func (m *Migration) record(loc docLocation, label string, out map[string]any) {
	md, _ := out["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	key := fmt.Sprint(out["kind"], " ", ns, "/", name)
	if first, ok := m.seen[key]; ok {
		what := "defined twice"
		if key != label { // made from another object
			what = key + " " + what
		}
		fmt.Fprintf(m.stderr, "warning: %s: %s, in %s and in %s; both are written\n", label, what, first, loc)
	} else {
		m.seen[key] = loc.String()
	}
	m.converted++
	m.docs = append(m.docs, migratedDoc{value: out})
}

// convertImageUpdater converts argocd-image-updater's configuration: an
// ImageUpdater is replaced by our objects; an annotated Application stays
// (passed through as written, text or value), followed by them.
func (m *Migration) convertImageUpdater(loc docLocation, text []byte, value any, obj map[string]any) {
	out, c := convertImageUpdaterObject(obj)
	if !m.reported(loc, c) {
		return
	}
	if c.kind == "Application" {
		if text != nil {
			m.passThrough(text, nil, obj)
		} else {
			m.passThrough(nil, value, obj)
		}
	}
	for _, o := range out {
		m.record(loc, c.label, o)
	}
}

// Write prints the documents as multi-document YAML or a JSON List.
func (m *Migration) Write(w io.Writer, format string) error {
	if format == "json" {
		items := make([]json.RawMessage, 0, len(m.docs))
		for _, d := range m.docs {
			var j []byte
			var err error
			if d.text != nil {
				j, err = sigsyaml.YAMLToJSON(d.text)
			} else {
				j, err = json.Marshal(d.value)
			}
			if err != nil {
				return err
			}
			items = append(items, j)
		}
		b, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var buf bytes.Buffer
	for i, d := range m.docs {
		text := d.text
		if text == nil {
			var err error
			if text, err = sigsyaml.Marshal(d.value); err != nil {
				return err
			}
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(bytes.TrimRight(text, "\n"))
		buf.WriteString("\n")
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// ReadCluster lists the Flux image objects of namespace ns (all namespaces
// when ns is ""), kind by kind, each in the most preferred version the API
// server serves it in.
func (m *Migration) ReadCluster(ctx context.Context, disc discovery.DiscoveryInterface, dyn dynamic.Interface, ns string) error {
	served, err := fluxServedVersions(disc)
	if err != nil {
		return err
	}
	read := false
	for _, fk := range fluxImageKinds {
		version, ok := served[fk.resource]
		if !ok {
			fmt.Fprintf(m.stderr, "note: %s.%s is not installed in the cluster (in a version migrate reads: %s); no %s read\n",
				fk.resource, FluxImageGroup, strings.Join(fluxImageVersions, ", "), fk.kind)
			continue
		}
		gvr := schema.GroupVersionResource{Group: FluxImageGroup, Version: version, Resource: fk.resource}
		var items []map[string]any
		opts := metav1.ListOptions{Limit: 500}
		for {
			list, err := dyn.Resource(gvr).Namespace(ns).List(ctx, opts)
			if err != nil {
				return fmt.Errorf("listing %s.%s: %w", fk.resource, FluxImageGroup, err)
			}
			for _, it := range list.Items {
				items = append(items, it.Object)
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
		read = true
		for _, obj := range items {
			m.convert(docLocation{}, obj)
		}
	}
	if read && m.converted == 0 && m.failed == 0 {
		where := "namespace " + ns
		if ns == "" {
			where = "any namespace"
		}
		fmt.Fprintf(m.stderr, "note: no %s objects in %s\n", FluxImageGroup, where)
	}
	return nil
}

// fluxServedVersions maps each Flux image resource the API server serves
// to the first version of fluxImageVersions it is served in. The group not
// being served at all is no error: nothing is installed.
func fluxServedVersions(disc discovery.DiscoveryInterface) (map[string]string, error) {
	groups, err := disc.ServerGroups()
	if err != nil {
		return nil, fmt.Errorf("discovering the API groups: %w", err)
	}
	servedVersions := map[string]bool{}
	for _, g := range groups.Groups {
		if g.Name == FluxImageGroup {
			for _, v := range g.Versions {
				servedVersions[v.Version] = true
			}
		}
	}
	out := map[string]string{}
	for _, v := range fluxImageVersions {
		if !servedVersions[v] {
			continue
		}
		res, err := disc.ServerResourcesForGroupVersion(FluxImageGroup + "/" + v)
		if apierrors.IsNotFound(err) {
			continue // removed between the two calls
		}
		if err != nil {
			return nil, fmt.Errorf("discovering %s/%s: %w", FluxImageGroup, v, err)
		}
		for _, r := range res.APIResources {
			if _, ok := out[r.Name]; !ok && !strings.Contains(r.Name, "/") {
				out[r.Name] = v
			}
		}
	}
	return out, nil
}
