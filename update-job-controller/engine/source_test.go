package engine

import (
	"context"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// An update whose image says where it was built from names that source in
// the commit: the default message lists the source change with GitHub's
// compare page (the replaced value is the image the policy chose before),
// an Image-Source trailer per revision closes it, and the result's change
// carries the same.
func TestTheCommitNamesTheSourceChanges(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "team/fleet", map[string]string{"deploy/app.yaml": deployment})
	prev := meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.4.0"}
	p := plan(srv.RepoURL("team/fleet"), func(p *writeback.Plan) {
		p.Path = "deploy"
		p.Update.Sources = map[string]*meta.ImageSourceChange{"apps:podinfo": {
			Source:         meta.ImageSource{URL: "https://github.com/stefanprodan/podinfo", Revision: "bbbbbbbbbbbb", Version: "6.5.0"},
			Previous:       &prev,
			PreviousSource: &meta.ImageSource{URL: "https://github.com/stefanprodan/podinfo", Revision: "aaaaaaaaaaaa"},
		}}
	})
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{Git: &git.Auth{}}, newCache(t))
	out, err := e.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	msg := testgit.Git(t, srv.BarePath("team/fleet"), "log", "-1", "--format=%B", out.Commit)
	for _, want := range []string{
		"Source changes:\n- https://github.com/stefanprodan/podinfo aaaaaaaaaaaa..bbbbbbbbbbbb: https://github.com/stefanprodan/podinfo/compare/aaaaaaaaaaaa...bbbbbbbbbbbb\n",
		"\n\nImage-Source: https://github.com/stefanprodan/podinfo@bbbbbbbbbbbb\n",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the commit message lacks %q:\n%s", want, msg)
		}
	}
	if !strings.HasSuffix(msg, "Image-Source: https://github.com/stefanprodan/podinfo@bbbbbbbbbbbb\n\n") && !strings.HasSuffix(msg, "Image-Source: https://github.com/stefanprodan/podinfo@bbbbbbbbbbbb\n") {
		t.Errorf("the trailer does not end the message:\n%q", msg)
	}
	changes := out.Changes.Changes()
	if len(changes) != 1 || changes[0].Source == nil || changes[0].Source.PreviousRevision != "aaaaaaaaaaaa" || changes[0].Source.Version != "6.5.0" {
		t.Errorf("changes %+v", changes)
	}
}

// A promoted image a person approved is committed with an Approved-by
// trailer naming them, once per approver, and the result's change carries
// the approval.
func TestTheCommitNamesWhoApprovedThePromotion(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "team/fleet", map[string]string{"deploy/app.yaml": deployment})
	p := plan(srv.RepoURL("team/fleet"), func(p *writeback.Plan) {
		p.Path = "deploy"
		p.Update.Approvals = map[string]*meta.Approval{"apps:podinfo": {Digest: "sha256:2222", By: "alice@example.com"}}
	})
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{Git: &git.Auth{}}, newCache(t))
	out, err := e.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	msg := testgit.Git(t, srv.BarePath("team/fleet"), "log", "-1", "--format=%B", out.Commit)
	trailers := testgit.Git(t, srv.BarePath("team/fleet"), "log", "-1", "--format=%(trailers:key=Approved-by,valueonly)", out.Commit)
	if strings.TrimSpace(trailers) != "alice@example.com" {
		t.Errorf("git reads the Approved-by trailers as %q, want alice@example.com; message:\n%s", trailers, msg)
	}
	changes := out.Changes.Changes()
	if len(changes) != 1 || changes[0].Approval == nil || changes[0].Approval.By != "alice@example.com" {
		t.Errorf("changes %+v", changes)
	}
}
