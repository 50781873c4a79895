package forges

// Gerrit cannot run here, so the adapter's REST calls are tested against
// exchanges written from Gerrit's public REST documentation
// (gerrit-review.googlesource.com/Documentation/rest-api-changes.html:
// "Query Changes" with q, o=CURRENT_REVISION and o=CURRENT_COMMIT and n;
// ChangeInfo, RevisionInfo, CommitInfo and GitPersonInfo with its UTC date
// and tz in minutes; "Abandon Change" with an AbandonInput; the ")]}'"
// guard before every JSON answer; refusals in plain text; authenticated
// calls under /a/ with the HTTP password by basic authentication),
// trimmed to the fields the adapter reads. The push side (refs/for,
// Change-Id) is tested against a real git server with Gerrit's checks in
// its hooks: engine's TestGerritKeepsOneChangePerStream.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/forge"
)

const gerritChangeID = "I8473b95934b5732ac55d26311a706c9c2bde9940"

func gerritNew(t *testing.T, srv *httptest.Server) forge.PushReviewer {
	t.Helper()
	c, err := forge.New(forge.Options{Provider: Gerrit, APIURL: srv.URL + "/a/", Repository: "platform/fleet",
		Token: "http-pass", Username: "bot", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c.(forge.PushReviewer)
}

const gerritOpenChange = `)]}'
[{"id": "platform%2Ffleet~main~` + gerritChangeID + `", "project": "platform/fleet", "branch": "main",
  "topic": "image-update/app", "change_id": "` + gerritChangeID + `", "subject": "Update app to 1.2.4",
  "status": "NEW", "_number": 4711, "work_in_progress": true, "current_revision": "184ebe53805e102605d11f6b143486d15c23a09c",
  "revisions": {"184ebe53805e102605d11f6b143486d15c23a09c": {"kind": "REWORK", "_number": 2,
    "ref": "refs/changes/11/4711/2", "commit": {
      "parents": [{"commit": "1eee2c9d8f352483781e772f35dc586a69ff5646", "subject": "Base"}],
      "author": {"name": "bot", "email": "bot@example.com", "date": "2026-12-04 10:11:12.000000000", "tz": 60},
      "committer": {"name": "bot", "email": "bot@example.com", "date": "2026-12-04 10:11:13.000000000", "tz": -300},
      "subject": "Update app to 1.2.4",
      "message": "Update app to 1.2.4\n\nChange-Id: ` + gerritChangeID + `\n"}}}}]
`

// A stream's change on Gerrit: found by its topic among the open changes
// of the project's branch, with its current patch set's commit (parent,
// people at their times and zones, message, Change-Id), then abandoned
// with the comment as the abandon's message.
func TestGerritFindsAndAbandonsTheStreamsChange(t *testing.T) {
	query := url.Values{"q": {`topic:"image-update/app" status:open project:"platform/fleet" branch:"main"`},
		"o": {"CURRENT_REVISION", "CURRENT_COMMIT"}, "n": {"2"}}
	srv := replayer{authHeader: "Authorization", auth: "Basic Ym90Omh0dHAtcGFzcw==", exact: true}.serve(t,
		replayCall{method: "GET", path: "/a/changes/", query: query, reply: ")]}'\n[]\n"},
		replayCall{method: "GET", path: "/a/changes/", query: query, reply: gerritOpenChange},
		replayCall{method: "POST", path: "/a/changes/platform%2Ffleet~4711/abandon", body: `{"message": "main has the change"}`,
			reply: `)]}'` + "\n" + `{"_number": 4711, "status": "ABANDONED"}`},
	)
	c := gerritNew(t, srv)
	ctx := context.Background()
	if r, err := c.FindOpen(ctx, "image-update/app", "main"); r != nil || err != nil {
		t.Fatalf("FindOpen with none open: %+v, %v", r, err)
	}
	r, err := c.FindOpen(ctx, "image-update/app", "main")
	if err != nil {
		t.Fatal(err)
	}
	if r.Number != 4711 || r.URL != srv.URL+"/c/platform/fleet/+/4711" || r.State != forge.Open || !r.Draft ||
		r.HeadCommit != "184ebe53805e102605d11f6b143486d15c23a09c" || r.Title != "Update app to 1.2.4" {
		t.Errorf("found %+v", r)
	}
	pc := r.Pushed
	wantAuthor := time.Date(2026, 12, 4, 11, 11, 12, 0, time.FixedZone("", 3600))
	if pc == nil || pc.Parent != "1eee2c9d8f352483781e772f35dc586a69ff5646" || pc.Trailer != "Change-Id: "+gerritChangeID ||
		!pc.Author.When.Equal(wantAuthor) || pc.Author.When.Format("-0700") != "+0100" || pc.Committer.When.Format("-0700") != "-0500" ||
		pc.Author.Email != "bot@example.com" || !strings.HasSuffix(pc.Message, gerritChangeID+"\n") {
		t.Errorf("pushed commit %+v", pc)
	}
	if got := c.Trailer(r, "image-update/app", "main", "seed"); got != "Change-Id: "+gerritChangeID {
		t.Errorf("the open change's trailer is %q", got)
	}
	if err := c.Close(ctx, r, "main has the change"); err != nil {
		t.Fatal(err)
	}
}

// A new review's Change-Id is Gerrit's form and differs with the seed, so
// that a stream never pushes to a change it closed; a refusal quotes
// Gerrit's plain-text words; a rate limit says when to come back.
func TestGerritTrailersAndRefusals(t *testing.T) {
	srv := replayer{authHeader: "Authorization", auth: "Basic Ym90Omh0dHAtcGFzcw=="}.serve(t,
		replayCall{method: "POST", path: "/a/changes/platform%2Ffleet~9/abandon", status: http.StatusConflict, reply: "change is abandoned\n"},
		replayCall{method: "GET", path: "/a/changes/", status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "120"}, reply: "Too many requests\n"},
	)
	c := gerritNew(t, srv)
	a, b := c.Trailer(nil, "image-update/app", "main", "base1"), c.Trailer(nil, "image-update/app", "main", "base2")
	if a == b || len(a) != len("Change-Id: ")+41 || !strings.HasPrefix(a, "Change-Id: I") || a != c.Trailer(nil, "image-update/app", "main", "base1") {
		t.Errorf("new trailers %q and %q: want Change-Id: I and 40 hex digits, the same for a seed and another for another", a, b)
	}
	err := c.Close(context.Background(), &forge.Request{Number: 9}, "x")
	var fe *forge.Error
	if !errors.As(err, &fe) || fe.StatusCode != http.StatusConflict || !strings.Contains(err.Error(), "change is abandoned") {
		t.Errorf("abandoning a closed change: %v", err)
	}
	_, err = c.FindOpen(context.Background(), "h", "main")
	if !errors.As(err, &fe) || !fe.RateLimited() || fe.RetryAfter != 2*time.Minute {
		t.Errorf("rate limited: %v", err)
	}
}

// The ref a review is pushed to carries the topic and what Gerrit takes
// as ref options; what it cannot carry is refused as a spec to change.
func TestGerritReviewRef(t *testing.T) {
	c := gerritNew(t, httptest.NewServer(http.NotFoundHandler()))
	ref, err := c.ReviewRef(forge.NewRequest{Head: "image-update/app", Base: "release/1.x", Draft: true,
		Labels: []string{"images"}, Reviewers: []string{"alice@example.com", "bob"}})
	if want := "refs/for/release/1.x%topic=image-update/app,wip,hashtag=images,r=alice@example.com,r=bob"; err != nil || ref != want {
		t.Errorf("ReviewRef: %q, %v; want %q", ref, err, want)
	}
	for _, req := range []forge.NewRequest{
		{Head: "h", Base: "main", AutoMerge: forge.Squash},
		{Head: "h", Base: "main", Assignees: []string{"me"}},
		{Head: "h", Base: "main", Labels: []string{"two words"}},
		{Head: "h", Base: "main", Reviewers: []string{"a%b"}},
		{Head: "h", Base: "main", Labels: []string{"x~y"}},
	} {
		if _, err := c.ReviewRef(req); !errors.Is(err, forge.ErrUnsupported) {
			t.Errorf("ReviewRef(%+v): %v, want ErrUnsupported", req, err)
		}
	}
}

// Gerrit's git URLs name the project with or without the authenticated
// /a/ prefix, nested or not; the API is under /a/ on the same host.
func TestGerritReadsItsGitURLs(t *testing.T) {
	for _, tt := range []struct{ url, api, repo string }{
		{"https://gerrit.example.com/a/platform/fleet", "https://gerrit.example.com/a/", "platform/fleet"},
		{"https://gerrit.example.com/fleet", "https://gerrit.example.com/a/", "fleet"},
		{"ssh://bot@gerrit.example.com:29418/platform/fleet", "https://gerrit.example.com/a/", "platform/fleet"},
		{"https://android-review.googlesource.com/platform/build", "https://android-review.googlesource.com/a/", "platform/build"},
	} {
		ep, err := forge.Resolve(tt.url, "", "")
		if err != nil || *ep != (forge.Endpoint{Provider: Gerrit, APIURL: tt.api, Repository: tt.repo}) {
			t.Errorf("%s: %+v, %v", tt.url, ep, err)
		}
	}
}
