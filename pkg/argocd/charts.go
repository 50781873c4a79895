package argocd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// A Helm-chart Application renders a chart from a chart repository at its
// targetRevision, the chart version; there is no path in git to write an
// override file to, and Argo CD's override file cannot set the revision
// (its merge keeps the source's repoURL, path, chart and targetRevision).
// The version lives in the Application's own manifest, where an
// app-of-apps (or whatever applies the Application) keeps it in git: that
// is what is written, at the targetRevision of the Application's chart
// sources, found by the Application's name rather than a marker.

// Position is where a scalar starts in a YAML file, as go-yaml counts:
// line and column from 1.
type Position struct{ Line, Column int }

// ChartRevisions finds in a YAML file (any number of documents) the
// targetRevision of each chart source of the Argo CD Application name in
// namespace: spec.source, or each of spec.sources, that names a chart
// (chart, when it is not empty). A manifest that names no namespace
// matches any: whatever applies it gives it one. A document that does not
// parse ends the search with an error; others are skipped.
func ChartRevisions(data []byte, namespace, name, chart string) ([]Position, error) {
	if !bytes.Contains(data, []byte("argoproj.io")) {
		return nil, nil
	}
	var out []Position
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		root := doc.Content[0]
		if !strings.HasPrefix(scalarAt(root, "apiVersion"), "argoproj.io/") || scalarAt(root, "kind") != "Application" {
			continue
		}
		md := exactValue(root, "metadata")
		if md == nil || md.Kind != yaml.MappingNode || scalarAt(md, "name") != name {
			continue
		}
		if ns := scalarAt(md, "namespace"); ns != "" && ns != namespace {
			continue
		}
		spec := exactValue(root, "spec")
		if spec == nil || spec.Kind != yaml.MappingNode {
			continue
		}
		var sources []*yaml.Node
		if s := exactValue(spec, "source"); s != nil {
			sources = append(sources, s)
		}
		if s := exactValue(spec, "sources"); s != nil && s.Kind == yaml.SequenceNode {
			sources = append(sources, s.Content...)
		}
		for _, s := range sources {
			if s.Kind != yaml.MappingNode {
				continue
			}
			c := scalarAt(s, "chart")
			if c == "" || chart != "" && c != chart {
				continue
			}
			rev := exactValue(s, "targetRevision")
			if rev == nil || rev.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("application %s: the source of chart %s has no targetRevision to set", name, c)
			}
			out = append(out, Position{Line: rev.Line, Column: rev.Column})
		}
	}
}

// scalarAt is the scalar value of key in mapping m, "" when it has none.
func scalarAt(m *yaml.Node, key string) string {
	if v := exactValue(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}
