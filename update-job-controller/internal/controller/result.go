package controller

import (
	"slices"
	"strings"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// apiResult is the setters' result in the UpdateJob status form. The
// markers are summed up per policy within the status's bounds (exact
// counts, lists cut), against the plan's images: those no marker names,
// and markers naming none of them.
func apiResult(r *setters.Result, images map[string]writeback.Image) *updatev1.UpdateResult {
	out := &updatev1.UpdateResult{}
	out.Markers, out.OmittedMarkerPolicies, out.UnmarkedPolicies = markerSummary(r.Markers, images)
	for _, f := range r.Files {
		fr := updatev1.FileResult{Path: f.Path}
		for _, o := range f.Objects {
			or := updatev1.ObjectResult{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
			for _, c := range o.Changes {
				or.Changes = append(or.Changes, updatev1.Change{OldValue: c.OldValue, NewValue: c.NewValue, Setter: c.Setter})
			}
			fr.Objects = append(fr.Objects, or)
		}
		out.Files = append(out.Files, fr)
	}
	return out
}

// markerSummary groups markers by policy: policies without a setter first
// (the ones a reader is looking for), then by name, at most
// MaxMarkerPolicies entries of MaxMarkerFiles files each; it also returns
// how many entries were cut, and the policies no marker names, sorted.
func markerSummary(markers []setters.MarkerSite, images map[string]writeback.Image) ([]updatev1.PolicyMarkers, int, []string) {
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
		if n := len(e.Files); n < updatev1.MaxMarkerFiles && (n == 0 || e.Files[n-1] != m.Path) {
			e.Files = append(e.Files, m.Path)
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

// discovered sums up what discovery found for the status: images by name,
// at most MaxDiscovered, each with up to MaxMarkerFiles files.
func discovered(d *engine.Discovered, res *updatev1.UpdateResult) {
	res.DiscoverSkipped = d.Skipped
	for _, img := range d.Images {
		if len(res.Discovered) == updatev1.MaxDiscovered {
			res.OmittedDiscovered++
			continue
		}
		di := updatev1.DiscoveredImage{Name: img.Name, Tag: img.Tag, Digest: img.Digest, Locations: len(img.Locations), Policy: d.Policies[img.Name]}
		for _, l := range img.Locations {
			if di.PolicyAnnotation == "" {
				di.PolicyAnnotation = l.Policy
			}
			if n := len(di.Files); n < updatev1.MaxMarkerFiles && (n == 0 || di.Files[n-1] != l.File) {
				di.Files = append(di.Files, l.File)
			}
		}
		res.Discovered = append(res.Discovered, di)
	}
}

// fileResults are a container's changes in the status form.
func fileResults(files []mirror.FileChange) []updatev1.FileResult {
	var out []updatev1.FileResult
	for _, c := range files {
		out = append(out, updatev1.FileResult{Path: c.Path, Operation: updatev1.FileOperation(c.Operation)})
	}
	return out
}

// pullRequestStatus is the run's request in the status form; the engine's
// states and actions are the API's words.
func pullRequestStatus(pr *engine.PullRequest) *updatev1.PullRequestStatus {
	if pr == nil {
		return nil
	}
	return &updatev1.PullRequestStatus{URL: pr.URL, Number: pr.Number, State: updatev1.PullRequestState(pr.State),
		HeadBranch: pr.HeadBranch, HeadCommit: pr.HeadCommit, Action: updatev1.PullRequestAction(pr.Action)}
}
