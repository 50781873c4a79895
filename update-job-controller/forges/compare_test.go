package forges

// GitHub and GitLab cannot run here, so their compare calls are tested
// against exchanges written from their REST documentation (GitHub's
// "Compare two commits", GET /repos/{owner}/{repo}/compare/{base}...{head}
// with per_page, answering total_commits and commits oldest first;
// GitLab's "Compare branches, tags or commits", GET
// /projects/:id/repository/compare with from and to, answering commits
// with id and title). Gitea's is tested against a real Gitea:
// tests/pullrequest TestPullRequestNamesTheSourceChanges.

import (
	"context"
	"net/url"
	"slices"
	"testing"

	"toolkit.dev/image-toolkit/pkg/forge"
)

// The commits between two revisions come as the forge lists them, at
// most as many as asked, with the count of all of them beside.
func TestCompareListsTheCommitsBetween(t *testing.T) {
	want := []forge.Commit{{SHA: "1111111", Subject: "feat: one"}, {SHA: "2222222", Subject: "fix: two"}}
	t.Run("github", func(t *testing.T) {
		srv := ghServer(t, replayCall{method: "GET", path: "/repos/org/app/compare/aaaaaaa...bbbbbbb", query: url.Values{"per_page": {"2"}},
			reply: `{"status": "ahead", "ahead_by": 3, "total_commits": 3, "commits": [
				{"sha": "1111111", "commit": {"message": "feat: one\n\nbody"}},
				{"sha": "2222222", "commit": {"message": "fix: two"}},
				{"sha": "3333333", "commit": {"message": "chore: three"}}]}`})
		got, total, err := ghClient(t, srv, "/").(forge.CommitLister).Commits(context.Background(), "aaaaaaa", "bbbbbbb", 2)
		if err != nil || total != 3 || !slices.Equal(got, want) {
			t.Errorf("Commits = %+v, %d, %v", got, total, err)
		}
	})
	t.Run("gitlab", func(t *testing.T) {
		srv := glServer(t, replayCall{method: "GET", path: "/api/v4/projects/group%2Fsub%2Fapp/repository/compare",
			query: url.Values{"from": {"aaaaaaa"}, "to": {"bbbbbbb"}},
			reply: `{"commit": {"id": "2222222"}, "commits": [{"id": "1111111", "title": "feat: one", "message": "feat: one\n\nbody"},
				{"id": "2222222", "title": "fix: two"}], "diffs": [], "compare_timeout": false, "compare_same_ref": false}`})
		got, total, err := glNew(t, srv).(forge.CommitLister).Commits(context.Background(), "aaaaaaa", "bbbbbbb", 50)
		if err != nil || total != 2 || !slices.Equal(got, want) {
			t.Errorf("Commits = %+v, %d, %v", got, total, err)
		}
	})
}
