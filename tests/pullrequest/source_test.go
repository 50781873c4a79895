package pullrequest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/imagesource"
)

// Traceability through the three controllers on Gitea: the podinfo
// images are labelled with the commits of a source repository on the same
// Gitea they were built from. The first request (from the unlabelled
// 6.3.0 on main) names 6.3.1's source revision; once it is merged, the
// next names both revisions with Gitea's compare page and lists the
// source commit between them (read with the request's token: the source is
// on the same Gitea), and its commit ends in an Image-Source trailer.
func TestPullRequestNamesTheSourceChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := Start(ctx, t)
	clone, err := e.Gitea.CreateRepo(ctx, "podinfo-src", map[string]string{"main.go": "package main // 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	rev1, err := e.Gitea.PushBranch(ctx, "podinfo-src", "main", "main", map[string]string{"main.go": "package main // 2\n"}, "feat: serve the second page")
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := e.Gitea.PushBranch(ctx, "podinfo-src", "main", "main", map[string]string{"main.go": "package main // 3\n"}, "fix: the typo on the third page")
	if err != nil {
		t.Fatal(err)
	}
	web := strings.TrimSuffix(clone, ".git")
	push := func(tag, rev string) {
		t.Helper()
		if err := e.PushLabelled(ctx, tag, map[string]string{imagesource.KeySource: web, imagesource.KeyRevision: rev, imagesource.KeyVersion: tag}); err != nil {
			t.Fatal(err)
		}
		if err := e.RequestReconcile(ctx, e.repo); err != nil {
			t.Fatal(err)
		}
	}

	push("6.3.1", rev1)
	first := e.open("Update podinfo to 6.3.1")
	if !strings.Contains(first.Body, "Source changes:\n\n- "+web+": `"+rev1+"`\n") || strings.Contains(first.Body, "/compare/") {
		t.Fatalf("request #%d's body names no source revision, or compares with 6.3.0, which says no source:\n%s", first.Number, first.Body)
	}
	if err := e.Gitea.MergePull(ctx, "fleet", first.Number, "merge"); err != nil {
		t.Fatal(err)
	}
	if err := e.RequestReconcile(ctx, e.auto); err != nil {
		t.Fatal(err)
	}
	merged := e.Head("main")
	e.waitAutomation("the run after the merge", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.ObservedSourceRevision == "main@sha1:"+merged
	})

	push("6.3.2", rev2)
	second := e.open("Update podinfo to 6.3.2")
	compare := web + "/compare/" + rev1 + "..." + rev2
	// The source repository is on the fleet's Gitea: the request's token
	// lists the commit between the two revisions.
	if want := "- " + web + ": `" + rev1 + "` to `" + rev2 + "` (" + compare + ")\n  - `" + rev2[:12] + "` fix: the typo on the third page\n"; !strings.Contains(second.Body, want) {
		t.Fatalf("request #%d's body lacks %q:\n%s", second.Number, want, second.Body)
	}
	msg, err := e.FleetGit("log", "-1", "--format=%B", second.Head.SHA)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Image-Source: " + web + "@" + rev2; !strings.HasSuffix(strings.TrimSpace(msg), want) || !strings.Contains(msg, compare) {
		t.Errorf("the head commit's message does not compare the revisions and end in %q:\n%s", want, msg)
	}
	// The link is Gitea's real compare page, which lists the commit between.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, compare, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(e.Gitea.Admin, e.Gitea.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "fix: the typo on the third page") {
		t.Errorf("GET %s: %d, the page does not list the source commit", compare, resp.StatusCode)
	}
}
