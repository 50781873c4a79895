package runner

import (
	"fmt"
	"reflect"
	"testing"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/setters"
)

func site(path string, line int, policy string) setters.MarkerSite {
	return setters.MarkerSite{Path: path, Line: line, Marker: setters.Marker{Policy: policy}}
}

// The status sums the markers up per policy: exact counts, distinct files
// (at most three), policies without a setter first and flagged unknown, and
// the setters no marker names.
func TestAPIResultMarkers(t *testing.T) {
	res := &setters.Result{Markers: []setters.MarkerSite{
		site("a.yaml", 1, "apps:podinfo"), site("a.yaml", 2, "apps:podinfo"), site("a.yaml", 3, "apps:typo"),
		site("b.yaml", 1, "apps:podinfo"), site("c.yaml", 1, "apps:podinfo"), site("d.yaml", 9, "apps:podinfo"),
	}}
	policies := setters.Policies{"apps:podinfo": {}, "apps:redis": {}, "apps:nginx": {}}
	got := APIResult(res, policies)
	want := &updatev1.UpdateResult{
		Markers: []updatev1.PolicyMarkers{
			{Policy: "apps:typo", Count: 1, Files: []string{"a.yaml"}, Unknown: true},
			{Policy: "apps:podinfo", Count: 5, Files: []string{"a.yaml", "b.yaml", "c.yaml"}},
		},
		UnmarkedPolicies: []string{"apps:nginx", "apps:redis"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("APIResult:\n got %+v\nwant %+v", got, want)
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
	got := APIResult(res, setters.Policies{"apps:p050": {}})
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
