package webhook

import (
	"testing"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
)

// A push moves an automation when it names the repository and branch it
// checks out, or, for Applications written on several repositories or
// branches, those of any of its targets; a target tracking HEAD is moved
// by any push to its repository.
func TestPushMovesAnyTarget(t *testing.T) {
	at := func(url, branch string) *gitsource.Source {
		s := &gitsource.Source{Ref: updatev1.GitRepositoryRef{Branch: branch}, DefaultBranch: branch == ""}
		s.Repository.URL = url
		return s
	}
	key := func(u string) string { k, _ := gitsource.RepositoryKey(u); return k }
	fleet, stage := "https://git.example.com/fleet.git", "https://git.example.com/stage.git"
	targets := &gitsource.Source{Targets: []*gitsource.Source{at(fleet, "main"), at(stage, "release"), at("https://git.example.com/head.git", "")}}
	for _, tc := range []struct {
		src    *gitsource.Source
		repo   string
		branch string
		want   bool
	}{
		{at(fleet, "main"), fleet, "main", true},
		{at(fleet, "main"), fleet, "feature", false},
		{at(fleet, "main"), stage, "main", false},
		{targets, fleet, "main", true},
		{targets, "https://git.example.com/stage", "release", true},
		{targets, stage, "main", false},
		{targets, "https://git.example.com/head.git", "anything", true},
		{targets, "https://git.example.com/other.git", "main", false},
	} {
		if got := moves(tc.src, map[string]bool{key(tc.repo): true}, tc.branch); got != tc.want {
			t.Errorf("push to %s %s: moves %v, want %v", tc.repo, tc.branch, got, tc.want)
		}
	}
}
