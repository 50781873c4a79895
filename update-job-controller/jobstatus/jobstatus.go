// Package jobstatus writes what the write-back engine returns in the
// UpdateJob API's words, within the status's bounds: the files and the
// markers summed up per policy, what discovery found, the holds. The
// engine's own types stay plain Go (time.Time, no apimachinery), so that
// it links no Kubernetes; this is the one conversion. (The pull request
// needs none: the engine returns the API's own meta.PullRequestStatus.)
package jobstatus

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
)

// Result is the setters' result as the UpdateJob status stores it: the
// files as they are, and the markers summed up per policy within the
// status's bounds (exact counts, lists cut), against the plan's images:
// those no marker names, and markers naming none of them.
func Result(r *setters.Result, images map[string]meta.ImageRef) *updatev1.UpdateResult {
	out := &updatev1.UpdateResult{Files: r.Files}
	out.Markers, out.OmittedMarkerPolicies, out.UnmarkedPolicies = markerSummary(r.Markers, images)
	return out
}

// markerSummary groups markers by policy: policies without a setter first
// (the ones a reader is looking for), then by name, at most
// MaxMarkerPolicies entries of MaxMarkerFiles files each; it also returns
// how many entries were cut, and the policies no marker names, sorted.
func markerSummary(markers []setters.MarkerSite, images map[string]meta.ImageRef) ([]updatev1.PolicyMarkers, int, []string) {
	byPolicy := map[string]*updatev1.PolicyMarkers{}
	var entries []*updatev1.PolicyMarkers
	for _, m := range markers {
		e, ok := byPolicy[m.Marker.Policy]
		if !ok {
			_, known := images[m.Marker.Policy]
			e = &updatev1.PolicyMarkers{Policy: m.Marker.Policy, Unknown: !known}
			byPolicy[m.Marker.Policy] = e
			entries = append(entries, e)
		}
		e.Count++
		// Markers come in path order: a new file is a new last path.
		if n := len(e.Files); n < meta.MaxListedFiles && (n == 0 || e.Files[n-1] != m.Path) {
			e.Files = append(e.Files, m.Path)
			e.Lines = append(e.Lines, m.Line)
		}
	}
	slices.SortFunc(entries, func(a, b *updatev1.PolicyMarkers) int {
		if a.Unknown != b.Unknown {
			if a.Unknown {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Policy, b.Policy)
	})
	omitted := max(len(entries)-updatev1.MaxMarkerPolicies, 0)
	entries = entries[:len(entries)-omitted]
	var list []updatev1.PolicyMarkers
	for _, e := range entries {
		list = append(list, *e)
	}
	var unmarked []string
	for key := range images {
		if _, ok := byPolicy[key]; !ok {
			unmarked = append(unmarked, key)
		}
	}
	slices.Sort(unmarked)
	return list, omitted, unmarked
}

// Discovered records what discovery found, within the status's bound:
// at most MaxDiscovered images.
func Discovered(d *engine.Discovered, res *updatev1.UpdateResult) {
	res.DiscoverSkipped = d.Skipped
	res.Discovered = d.Images[:min(len(d.Images), updatev1.MaxDiscovered)]
	res.OmittedDiscovered = len(d.Images) - len(res.Discovered)
}

// Holds are the values the run left as a person set them, within the
// status's bound.
func Holds(in []engine.Hold) []updatev1.Hold {
	var out []updatev1.Hold
	for _, h := range in[:min(len(in), updatev1.MaxHolds)] {
		var since *metav1.Time
		if !h.Since.IsZero() {
			since = &metav1.Time{Time: h.Since}
		}
		out = append(out, updatev1.Hold{HoldKey: updatev1.HoldKey{Path: h.Path, Setter: h.Setter, Commit: h.Commit},
			Line: h.Line, Value: h.Value, From: h.From, Want: h.Want, Author: h.Author, Since: since, HeldWith: h.HeldWith})
	}
	return out
}
