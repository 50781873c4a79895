package jobstatus

import (
	"fmt"
	"reflect"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
)

func site(path string, line int, policy string) setters.MarkerSite {
	return setters.MarkerSite{Path: path, Line: line, Marker: setters.Marker{Policy: policy}}
}

// The status sums the markers up per policy: exact counts, distinct files
// (at most three) with the line of each one's first marker, policies without a setter first and flagged unknown, and
// the setters no marker names.
func TestAPIResultMarkers(t *testing.T) {
	res := &setters.Result{Markers: []setters.MarkerSite{
		site("a.yaml", 1, "apps:podinfo"), site("a.yaml", 2, "apps:podinfo"), site("a.yaml", 3, "apps:typo"),
		site("b.yaml", 4, "apps:podinfo"), site("c.yaml", 7, "apps:podinfo"), site("d.yaml", 9, "apps:podinfo"),
	}}
	policies := map[string]meta.ImageRef{"apps:podinfo": {}, "apps:redis": {}, "apps:nginx": {}}
	got := Result(res, policies)
	want := &updatev1.UpdateResult{
		Markers: []updatev1.PolicyMarkers{
			{Policy: "apps:typo", Count: 1, Files: []string{"a.yaml"}, Lines: []int{3}, Unknown: true},
			{Policy: "apps:podinfo", Count: 5, Files: []string{"a.yaml", "b.yaml", "c.yaml"}, Lines: []int{1, 4, 7}},
		},
		UnmarkedPolicies: []string{"apps:nginx", "apps:redis"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Result:\n got %+v\nwant %+v", got, want)
	}
}

// However many policies markers name, the status lists at most
// MaxMarkerPolicies of them and counts the rest.
func TestAPIResultMarkersAreBounded(t *testing.T) {
	res := &setters.Result{}
	n := updatev1.MaxMarkerPolicies + 7
	for i := range n {
		res.Markers = append(res.Markers, site("x.yaml", i+1, fmt.Sprintf("apps:p%03d", i)))
	}
	got := Result(res, map[string]meta.ImageRef{"apps:p050": {}})
	if len(got.Markers) != updatev1.MaxMarkerPolicies || got.OmittedMarkerPolicies != 7 {
		t.Fatalf("%d entries, %d omitted; want %d and 7", len(got.Markers), got.OmittedMarkerPolicies, updatev1.MaxMarkerPolicies)
	}
	// The known policy sorts after every unknown one, so it is cut.
	for _, m := range got.Markers {
		if !m.Unknown || m.Policy == "apps:p050" {
			t.Fatalf("entry %+v kept before unknown ones", m)
		}
	}
	if len(got.UnmarkedPolicies) != 0 {
		t.Errorf("unmarked %v: apps:p050 is marked", got.UnmarkedPolicies)
	}
}

// The status lists at most MaxDiscovered images and counts the rest, so
// a repository with thousands of images cannot outgrow the object.
func TestDiscoveredKeepsTheStatusBound(t *testing.T) {
	d := &engine.Discovered{Skipped: 2}
	for i := range updatev1.MaxDiscovered + 3 {
		d.Images = append(d.Images, meta.DiscoveredImage{ImageRef: meta.ImageRef{Name: fmt.Sprintf("ghcr.io/acme/app%d", i), Tag: "1.0.0"}, Locations: 1})
	}
	res := &updatev1.UpdateResult{}
	Discovered(d, res)
	if len(res.Discovered) != updatev1.MaxDiscovered || res.OmittedDiscovered != 3 || res.DiscoverSkipped != 2 ||
		res.Discovered[0].Name != "ghcr.io/acme/app0" {
		t.Errorf("listed %d, omitted %d, skipped %d", len(res.Discovered), res.OmittedDiscovered, res.DiscoverSkipped)
	}
	small := &updatev1.UpdateResult{}
	Discovered(&engine.Discovered{Images: d.Images[:2]}, small)
	if len(small.Discovered) != 2 || small.OmittedDiscovered != 0 {
		t.Errorf("listed %d, omitted %d", len(small.Discovered), small.OmittedDiscovered)
	}
}
