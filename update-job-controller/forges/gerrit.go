package forges

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git/refname"
)

// Gerrit is Gerrit Code Review.
const Gerrit forge.Provider = "gerrit"

// GerritForge is the registry entry of Gerrit, told by "gerrit" in a
// host's name and by Google's *-review.googlesource.com hosts. A project
// is its path, nested or not (platform/build, fleet); git serves it at
// https://HOST/PROJECT and, authenticated, https://HOST/a/PROJECT, and the
// REST API is under /a/ for authenticated calls.
var GerritForge = forge.Forge{
	Provider: Gerrit,
	Words:    []string{"gerrit", "-review.googlesource.com"},
	APIURL: func(scheme, host, hostport string) string {
		return scheme + "://" + hostport + "/a/"
	},
	Subgroups: true,
	Flat:      true,
	Repository: func(_, path string) (string, error) {
		return strings.TrimPrefix(path, "a/"), nil
	},
	New: newGerrit,
}

// gerritForge keeps one update stream's change on a Gerrit project. A
// change is opened and given new patch sets by pushing to
// refs/for/BRANCH (ReviewRef) with the stream's head branch name as its
// topic, and Gerrit tells a new patch set of a change from a new change by
// the Change-Id trailer of the commit's message: the open change of the
// stream's topic gives its Change-Id to every update (Trailer), so that
// each is a patch set of that one change. The REST API
// (gerrit-review.googlesource.com/Documentation/rest-api-changes.html)
// finds the stream's open change and abandons it; with an HTTP password,
// the user and password go by basic authentication.
//
// The push carries what Gerrit takes as options after the ref's '%'
// (topic, hashtags, reviewers, work in progress): libgit2 1.5 has no push
// options, and this form needs none. Gerrit has no auto-merge to ask for
// (a change is submitted by its project's submit rules) and this adapter
// sets no assignees: both are refused.
type gerritForge struct {
	api     *rest
	project string
	// web is where change pages are: the API's root without its "a/".
	web string
}

func newGerrit(opts forge.Options, hc *http.Client) (forge.Client, error) {
	api, err := newREST(Gerrit, opts, hc, gerritMessage)
	if err != nil {
		return nil, err
	}
	api.guard = ")]}'"
	return &gerritForge{api: api, project: opts.Repository, web: strings.TrimSuffix(api.root, "a/")}, nil
}

// gerritMessage reads Gerrit's refusals, which are plain text ("change is
// abandoned"), not JSON: AnswerMessage quotes them as they are.
func gerritMessage([]byte) (string, error) {
	return "", fmt.Errorf("gerrit answers refusals in plain text")
}

// Trailer is the open change's Change-Id, so that every update of the
// stream is a new patch set of it; with none open, a new Change-Id ("I"
// and 40 hex digits, as Gerrit's commit-msg hook makes) from the stream
// and seed. A closed change's Change-Id is never used again: Gerrit
// refuses a push for a closed change, and seed (the base and the values)
// differs for every new review of the stream.
func (g *gerritForge) Trailer(open *forge.Request, head, base, seed string) string {
	if open != nil && open.Pushed != nil && open.Pushed.Trailer != "" {
		return open.Pushed.Trailer
	}
	sum := sha1.Sum([]byte("image-toolkit\x00" + g.project + "\x00" + base + "\x00" + head + "\x00" + seed))
	return "Change-Id: I" + hex.EncodeToString(sum[:])
}

func (g *gerritForge) ReviewRef(req forge.NewRequest) (string, error) {
	switch {
	case req.AutoMerge != "":
		return "", unsupported(Gerrit, "Gerrit submits a change by its project's submit rules and has no auto-merge to ask for (an automation's spec.git.push.pullRequest.autoMerge, tk-image's --pr-auto-merge)")
	case len(req.Assignees) > 0:
		return "", unsupported(Gerrit, "Gerrit changes get no assignees here (pullRequest.assignees, --pr-assignee): ask reviewers instead (pullRequest.reviewers, --pr-reviewer)")
	}
	opts := []string{"topic=" + req.Head}
	if req.Draft {
		opts = append(opts, "wip")
	}
	for _, l := range req.Labels {
		opts = append(opts, "hashtag="+l)
	}
	for _, r := range req.Reviewers {
		opts = append(opts, "r="+r)
	}
	for _, o := range opts {
		_, v, _ := strings.Cut(o, "=")
		if strings.ContainsAny(v, ",% ") {
			return "", unsupported(Gerrit, "%q cannot be sent as a push option: Gerrit's ref options (refs/for/BRANCH%%topic=…,r=…) cannot hold ',', '%%' or spaces", v)
		}
	}
	ref := "refs/for/" + req.Base + "%" + strings.Join(opts, ",")
	if !refname.Valid(ref) {
		return "", unsupported(Gerrit, "%q is not a ref git can push to: the base branch, topic (the head branch's name), labels and reviewers must be valid in a ref name", ref)
	}
	return ref, nil
}

type gerritPerson struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	// Date is UTC, "2006-01-02 15:04:05.000000000"; TZ the offset the
	// commit was made in, in minutes.
	Date string `json:"date"`
	TZ   int    `json:"tz"`
}

func (p gerritPerson) signature() (forge.Signature, error) {
	when, err := time.Parse("2006-01-02 15:04:05.999999999", p.Date)
	if err != nil {
		return forge.Signature{}, fmt.Errorf("gerrit: the commit's date %q: %w", p.Date, err)
	}
	return forge.Signature{Name: p.Name, Email: p.Email, When: when.In(time.FixedZone("", p.TZ*60))}, nil
}

type gerritChange struct {
	Number          int    `json:"_number"`
	Project         string `json:"project"`
	Branch          string `json:"branch"`
	Topic           string `json:"topic"`
	ChangeID        string `json:"change_id"`
	Subject         string `json:"subject"`
	Status          string `json:"status"`
	WorkInProgress  bool   `json:"work_in_progress"`
	CurrentRevision string `json:"current_revision"`
	Revisions       map[string]struct {
		Number int    `json:"_number"`
		Ref    string `json:"ref"`
		Commit struct {
			Parents []struct {
				Commit string `json:"commit"`
			} `json:"parents"`
			Author    gerritPerson `json:"author"`
			Committer gerritPerson `json:"committer"`
			Subject   string       `json:"subject"`
			Message   string       `json:"message"`
		} `json:"commit"`
	} `json:"revisions"`
}

func (g *gerritForge) request(c *gerritChange, head string) (*forge.Request, error) {
	r := &forge.Request{Number: c.Number, Title: c.Subject, Head: head, Base: c.Branch, State: forge.Open,
		HeadCommit: c.CurrentRevision, Draft: c.WorkInProgress,
		URL: g.web + "c/" + c.Project + "/+/" + strconv.Itoa(c.Number)}
	switch c.Status {
	case "MERGED":
		r.State = forge.Merged
	case "ABANDONED":
		r.State = forge.Closed
	}
	rev, ok := c.Revisions[c.CurrentRevision]
	if !ok {
		return r, nil
	}
	r.Body = rev.Commit.Message
	pc := &forge.PushedCommit{Message: rev.Commit.Message, Trailer: "Change-Id: " + c.ChangeID}
	if len(rev.Commit.Parents) == 1 {
		pc.Parent = rev.Commit.Parents[0].Commit
	}
	var err error
	if pc.Author, err = rev.Commit.Author.signature(); err != nil {
		return nil, err
	}
	if pc.Committer, err = rev.Commit.Committer.signature(); err != nil {
		return nil, err
	}
	r.Pushed = pc
	return r, nil
}

func (g *gerritForge) FindOpen(ctx context.Context, head, base string) (*forge.Request, error) {
	op := fmt.Sprintf("finding the open change of %s into %s", head, base)
	q := url.Values{
		// The topic is the stream's (ReviewRef): a change of the stream
		// is found before its Change-Id is known.
		"q": {fmt.Sprintf("topic:%q status:open project:%q branch:%q", head, g.project, base)},
		"o": {"CURRENT_REVISION", "CURRENT_COMMIT"},
		"n": {"2"},
	}
	var changes []gerritChange
	if err := g.api.call(ctx, op, http.MethodGet, "changes/", q, nil, &changes); err != nil {
		return nil, err
	}
	for i := range changes {
		if c := &changes[i]; c.Status == "NEW" && c.Branch == base && c.Project == g.project && c.Topic == head {
			r, err := g.request(c, head)
			if err != nil {
				return nil, &forge.Error{Provider: Gerrit, Op: op, Message: err.Error()}
			}
			return r, nil
		}
	}
	return nil, nil
}

// Create and Edit are not called on a PushReviewer: a change is opened,
// and its message changed, by a push.
func (g *gerritForge) Create(context.Context, forge.NewRequest) (*forge.Request, error) {
	return nil, unsupported(Gerrit, "a change is opened by pushing to refs/for/BRANCH, not by an API call")
}

func (g *gerritForge) Edit(context.Context, *forge.Request, string, string) (*forge.Request, error) {
	return nil, unsupported(Gerrit, "a change's message is its commit's: it is changed by a new patch set")
}

// Close abandons the change with comment as the abandon's message, which
// Gerrit posts on the change.
func (g *gerritForge) Close(ctx context.Context, current *forge.Request, comment string) error {
	op := fmt.Sprintf("abandoning change %d", current.Number)
	id := url.PathEscape(g.project + "~" + strconv.Itoa(current.Number))
	return g.api.call(ctx, op, http.MethodPost, "changes/"+id+"/abandon", nil, map[string]string{"message": comment}, nil)
}
