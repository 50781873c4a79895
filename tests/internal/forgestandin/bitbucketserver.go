package forgestandin

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// NewBitbucketServer starts a stand-in for Bitbucket Data Center's REST
// API 1.0 with one repository, project key/slug. URL is its API root
// (https://HOST/rest/api/1.0/ on a real server); the web pages are under
// Web (projects/KEY/repos/SLUG/pull-requests/N), as a request's
// links.self names them.
//
// What it serves, as documented: GET and POST
// /projects/{projectKey}/repos/{repositorySlug}/pull-requests (the list by
// state, OPEN by default or ALL, and by direction with at, a fully
// qualified ref: OUTGOING lists the requests from it, INCOMING, the
// default, those into it; paged by start and limit with isLastPage and
// nextPageStart); GET and PUT …/{id}, PUT with the version it changes
// (optimistic locking: a stale version is refused with 409,
// PullRequestOutOfDateException) and replacing the reviewers, none when
// it names none; POST …/{id}/comments (text); POST
// …/{id}/decline and …/{id}/merge with the version, as query parameter or
// in the body, merge with autoMerge and a strategyId to ask the request to
// merge itself; errors as {"errors": [{"context", "message",
// "exceptionName"}]}. Pull requests have no labels or assignees.
//
// Its repository has a merge check that needs an approval and nobody
// approves here, so an auto-merge asked for stays pending, as on a server
// whose checks have not passed: the request stays open.
func NewBitbucketServer(t testing.TB, project, slug string, cfg Config) *Server {
	t.Helper()
	b := &bitbucketServer{project: project, slug: slug}
	return start(t, "/rest/api/1.0/", cfg, b.route)
}

type bitbucketServer struct{ project, slug string }

// The merge strategies a Data Center repository may enable.
var bbsStrategies = []string{"no-ff", "ff", "ff-only", "rebase-no-ff", "rebase-ff-only", "squash", "squash-ff-only"}

// bbsError is Data Center's error shape.
func bbsError(exception, message string) any {
	return map[string]any{"errors": []any{map[string]any{"context": nil, "message": message,
		"exceptionName": "com.atlassian.bitbucket." + exception}}}
}

func (b *bitbucketServer) route(s *Server, w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		s.refuse(w, r, http.StatusUnauthorized, bbsError("auth.IncorrectPasswordAuthenticationException",
			"Authentication failed. Please check your credentials and try again."), "Authorization "+r.Header.Get("Authorization"))
		return
	}
	parts, err := pathParts(r, "/rest/api/1.0/")
	if err != nil || len(parts) < 5 || parts[0] != "projects" || parts[2] != "repos" || parts[4] != "pull-requests" {
		s.refuse(w, r, http.StatusNotFound, bbsError("rest.NoSuchResourceException", "No resource matches "+r.URL.Path), "no such API path")
		return
	}
	if parts[1] != b.project || parts[3] != b.slug {
		s.refuse(w, r, http.StatusNotFound, bbsError("repository.NoSuchRepositoryException",
			fmt.Sprintf("Repository %s/%s does not exist.", parts[1], parts[3])), "another repository")
		return
	}
	rest := parts[5:]
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		b.list(s, w, r)
	case len(rest) == 0 && r.Method == http.MethodPost:
		b.create(s, w, r)
	case len(rest) >= 1:
		id, err := strconv.Atoi(rest[0])
		p := s.pull(id)
		if err != nil || p == nil {
			s.refuse(w, r, http.StatusNotFound, bbsError("pull.NoSuchPullRequestException",
				"No pull request exists with ID "+rest[0]+" for this repository."), "no pull request "+rest[0])
			return
		}
		switch {
		case len(rest) == 1 && r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, b.json(s, p))
		case len(rest) == 1 && r.Method == http.MethodPut:
			b.edit(s, w, r, p)
		case len(rest) == 2 && rest[1] == "comments" && r.Method == http.MethodPost:
			b.comment(s, w, r, p)
		case len(rest) == 2 && rest[1] == "decline" && r.Method == http.MethodPost:
			b.decline(s, w, r, p)
		case len(rest) == 2 && rest[1] == "merge" && r.Method == http.MethodPost:
			b.merge(s, w, r, p)
		default:
			s.refuse(w, r, http.StatusNotFound, bbsError("rest.NoSuchResourceException", "No resource matches "+r.URL.Path), "no such API path")
		}
	default:
		s.refuse(w, r, http.StatusMethodNotAllowed, bbsError("rest.MethodNotAllowedException", "Method not allowed"), "method")
	}
}

func (b *bitbucketServer) ref(s *Server, branch string) map[string]any {
	m := map[string]any{"id": "refs/heads/" + branch, "displayId": branch, "type": "BRANCH",
		"repository": map[string]any{"slug": b.slug, "name": b.slug, "project": map[string]any{"key": b.project}}}
	if c := s.commit(branch); c != "" {
		m["latestCommit"] = c
	}
	return m
}

func (b *bitbucketServer) json(s *Server, p *Pull) map[string]any {
	reviewers := []any{}
	for _, r := range p.Reviewers {
		reviewers = append(reviewers, map[string]any{"user": map[string]any{"name": r, "slug": r, "type": "NORMAL"},
			"role": "REVIEWER", "approved": false, "status": "UNAPPROVED"})
	}
	return map[string]any{
		"id": p.Number, "version": p.Version, "title": p.Title, "description": p.Body, "state": p.State,
		"open": p.State == "OPEN", "closed": p.State != "OPEN", "draft": p.Draft, "locked": false,
		"fromRef": b.ref(s, p.Head), "toRef": b.ref(s, p.Base), "reviewers": reviewers, "participants": []any{},
		"links": map[string]any{"self": []any{map[string]any{"href": p.URL}}},
	}
}

func (b *bitbucketServer) list(s *Server, w http.ResponseWriter, r *http.Request) {
	if err := queryOnly(r, "state", "direction", "at", "order", "draft", "withAttributes", "withProperties", "start", "limit", "filterText"); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", err.Error()), err.Error())
		return
	}
	q := r.URL.Query()
	state := q.Get("state")
	if state == "" {
		state = "OPEN"
	}
	if !slices.Contains([]string{"OPEN", "DECLINED", "MERGED", "ALL"}, state) {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", "state "+state+" is not OPEN, DECLINED, MERGED or ALL"), "state "+state)
		return
	}
	direction := q.Get("direction")
	if direction == "" {
		direction = "INCOMING"
	}
	if direction != "INCOMING" && direction != "OUTGOING" {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", "direction "+direction+" is not INCOMING or OUTGOING"), "direction "+direction)
		return
	}
	at := q.Get("at")
	if at != "" && !strings.HasPrefix(at, "refs/") {
		// The documentation asks for a fully qualified ref.
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", "at must be a fully qualified ref: "+at), "at "+at)
		return
	}
	start, okStart := intParam(q, "start", 0, 0, math.MaxInt)
	limit, okLimit := intParam(q, "limit", 25, 1, math.MaxInt)
	for name, ok := range map[string]bool{"start": okStart, "limit": okLimit} {
		if !ok {
			s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", name+" "+q.Get(name)), name+" "+q.Get(name))
			return
		}
	}
	// A server gives at most its own page size, whatever the limit.
	limit = min(limit, 100)
	var match []*Pull
	for _, p := range s.pulls {
		ref := "refs/heads/" + p.Base
		if direction == "OUTGOING" {
			ref = "refs/heads/" + p.Head
		}
		if (state == "ALL" || p.State == state) && (at == "" || ref == at) {
			match = append(match, p)
		}
	}
	slices.Reverse(match) // newest first, the documented default order
	from := min(start, len(match))
	to := min(from+limit, len(match))
	values := []any{}
	for _, p := range match[from:to] {
		values = append(values, b.json(s, p))
	}
	out := map[string]any{"size": to - from, "limit": limit, "start": start, "isLastPage": to == len(match), "values": values}
	if to < len(match) {
		out["nextPageStart"] = to
	}
	writeJSON(w, http.StatusOK, out)
}

type bbsRef struct {
	ID           string `json:"id"`
	DisplayID    string `json:"displayId,omitempty"`
	LatestCommit string `json:"latestCommit,omitempty"`
	Type         string `json:"type,omitempty"`
	Repository   *struct {
		Slug    string `json:"slug"`
		Name    string `json:"name,omitempty"`
		Project struct {
			Key string `json:"key"`
		} `json:"project"`
	} `json:"repository"`
}

// branch is the ref's branch when it is a branch of this repository.
func (b *bitbucketServer) branch(ref *bbsRef) (string, error) {
	switch {
	case ref == nil:
		return "", fmt.Errorf("no ref")
	case !strings.HasPrefix(ref.ID, "refs/heads/"):
		return "", fmt.Errorf("ref %q is not a fully qualified branch", ref.ID)
	case ref.Repository == nil || ref.Repository.Slug != b.slug || ref.Repository.Project.Key != b.project:
		return "", fmt.Errorf("ref %s names no repository, or another than %s/%s", ref.ID, b.project, b.slug)
	}
	return strings.TrimPrefix(ref.ID, "refs/heads/"), nil
}

type bbsReviewer struct {
	User struct {
		Name string `json:"name"`
	} `json:"user"`
}

func (b *bitbucketServer) reviewers(s *Server, in []bbsReviewer) ([]string, error) {
	var out []string
	for _, u := range in {
		if !s.knownUser(u.User.Name) {
			return nil, fmt.Errorf("user %q does not exist", u.User.Name)
		}
		out = append(out, u.User.Name)
	}
	return out, nil
}

func (b *bitbucketServer) create(s *Server, w http.ResponseWriter, r *http.Request) {
	var in struct {
		Title       string        `json:"title"`
		Description string        `json:"description"`
		State       string        `json:"state"`
		Open        *bool         `json:"open"`
		Closed      *bool         `json:"closed"`
		Locked      *bool         `json:"locked"`
		Draft       bool          `json:"draft"`
		FromRef     *bbsRef       `json:"fromRef"`
		ToRef       *bbsRef       `json:"toRef"`
		Reviewers   []bbsReviewer `json:"reviewers"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", err.Error()), err.Error())
		return
	}
	head, err := b.branch(in.FromRef)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", "fromRef: "+err.Error()), err.Error())
		return
	}
	base, err := b.branch(in.ToRef)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", "toRef: "+err.Error()), err.Error())
		return
	}
	switch {
	case strings.TrimSpace(in.Title) == "":
		s.refuse(w, r, http.StatusBadRequest, bbsError("validation.ArgumentValidationException", "title: A title is required."), "no title")
		return
	case s.commit(head) == "":
		s.refuse(w, r, http.StatusNotFound, bbsError("repository.NoSuchBranchException", "Repository "+b.slug+" does not contain "+in.FromRef.ID+"."), "no source branch in git")
		return
	case s.commit(base) == "":
		s.refuse(w, r, http.StatusNotFound, bbsError("repository.NoSuchBranchException", "Repository "+b.slug+" does not contain "+in.ToRef.ID+"."), "no target branch in git")
		return
	case s.commit(head) == s.commit(base):
		s.refuse(w, r, http.StatusConflict, bbsError("pull.EmptyPullRequestException",
			fmt.Sprintf("Pull request cannot be created because %s is already up-to-date with %s.", head, base)), "empty request")
		return
	case s.openFrom(head, base) != nil:
		s.refuse(w, r, http.StatusConflict, bbsError("pull.DuplicatePullRequestException",
			"Only one pull request may be open for a given source and target branch"), "duplicate")
		return
	}
	reviewers, err := b.reviewers(s, in.Reviewers)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("user.NoSuchUserException", err.Error()), err.Error())
		return
	}
	p := s.add(&Pull{Title: in.Title, Body: in.Description, Head: head, Base: base, State: "OPEN", Draft: in.Draft, Reviewers: reviewers})
	p.URL = fmt.Sprintf("%s/projects/%s/repos/%s/pull-requests/%d", s.Web, b.project, b.slug, p.Number)
	writeJSON(w, http.StatusCreated, b.json(s, p))
}

// version is the version a change names, from the query or the body's
// version; -1 when neither does.
func version(r *http.Request, body *int) (int, error) {
	if v := r.URL.Query().Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("version %q", v)
		}
		if body != nil && *body != n {
			return 0, fmt.Errorf("version %d in the query, %d in the body", n, *body)
		}
		return n, nil
	}
	if body != nil {
		return *body, nil
	}
	return -1, nil
}

// stale refuses a change of another version than the request's.
func (b *bitbucketServer) stale(s *Server, w http.ResponseWriter, r *http.Request, p *Pull, v int) bool {
	if v == p.Version {
		return false
	}
	why := fmt.Sprintf("version %d, the request is at %d", v, p.Version)
	if v < 0 {
		why = "no version"
	}
	s.refuse(w, r, http.StatusConflict, bbsError("pull.PullRequestOutOfDateException",
		"You are attempting to modify a pull request based on out-of-date information."), why)
	return true
}

func (b *bitbucketServer) edit(s *Server, w http.ResponseWriter, r *http.Request, p *Pull) {
	var in struct {
		Version     *int           `json:"version"`
		Title       *string        `json:"title"`
		Description *string        `json:"description"`
		Reviewers   *[]bbsReviewer `json:"reviewers"`
		ToRef       *bbsRef        `json:"toRef"`
		Draft       *bool          `json:"draft"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", err.Error()), err.Error())
		return
	}
	if in.Version == nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("validation.ArgumentValidationException", "version: the version is required."), "no version")
		return
	}
	if b.stale(s, w, r, p, *in.Version) {
		return
	}
	if p.State != "OPEN" {
		s.refuse(w, r, http.StatusConflict, bbsError("pull.InvalidPullRequestStateException", "The pull request is "+p.State+"."), "edit of a "+p.State+" request")
		return
	}
	if in.Title != nil {
		p.Title = *in.Title
	}
	if in.Description != nil {
		p.Body = *in.Description
	}
	// PUT replaces the reviewers ("the reviewers list may be updated using
	// this resource"): an update without them leaves the request with
	// none, as Data Center does.
	p.Reviewers = nil
	if in.Reviewers != nil {
		reviewers, err := b.reviewers(s, *in.Reviewers)
		if err != nil {
			s.refuse(w, r, http.StatusBadRequest, bbsError("user.NoSuchUserException", err.Error()), err.Error())
			return
		}
		p.Reviewers = reviewers
	}
	if in.Draft != nil {
		p.Draft = *in.Draft
	}
	p.Version++
	p.Edits++
	writeJSON(w, http.StatusOK, b.json(s, p))
}

func (b *bitbucketServer) comment(s *Server, w http.ResponseWriter, r *http.Request, p *Pull) {
	var in struct {
		Text   string `json:"text"`
		Parent *struct {
			ID int `json:"id"`
		} `json:"parent"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", err.Error()), err.Error())
		return
	}
	if strings.TrimSpace(in.Text) == "" {
		s.refuse(w, r, http.StatusBadRequest, bbsError("validation.ArgumentValidationException", "text: A comment needs text."), "no text")
		return
	}
	p.Comments = append(p.Comments, in.Text)
	writeJSON(w, http.StatusCreated, map[string]any{"id": len(p.Comments), "version": 0, "text": in.Text})
}

func (b *bitbucketServer) decline(s *Server, w http.ResponseWriter, r *http.Request, p *Pull) {
	var in struct {
		Version *int   `json:"version"`
		Comment string `json:"comment"`
	}
	if r.ContentLength != 0 {
		if err := decode(r, &in); err != nil {
			s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", err.Error()), err.Error())
			return
		}
	}
	v, err := version(r, in.Version)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", err.Error()), err.Error())
		return
	}
	if b.stale(s, w, r, p, v) {
		return
	}
	if p.State != "OPEN" {
		s.refuse(w, r, http.StatusConflict, bbsError("pull.InvalidPullRequestStateException", "The pull request is "+p.State+"."), "decline of a "+p.State+" request")
		return
	}
	if in.Comment != "" {
		p.Comments = append(p.Comments, in.Comment)
	}
	p.State = "DECLINED"
	p.Version++
	writeJSON(w, http.StatusOK, b.json(s, p))
}

func (b *bitbucketServer) merge(s *Server, w http.ResponseWriter, r *http.Request, p *Pull) {
	var in struct {
		Version     *int   `json:"version"`
		AutoMerge   bool   `json:"autoMerge"`
		AutoSubject any    `json:"autoSubject"`
		Message     string `json:"message"`
		StrategyID  string `json:"strategyId"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", err.Error()), err.Error())
		return
	}
	v, err := version(r, in.Version)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbsError("rest.BadRequestException", err.Error()), err.Error())
		return
	}
	switch {
	case b.stale(s, w, r, p, v):
		return
	case in.StrategyID != "" && !slices.Contains(bbsStrategies, in.StrategyID):
		s.refuse(w, r, http.StatusBadRequest, bbsError("scm.MergeStrategyNotFoundException", "No merge strategy "+in.StrategyID+"."), "strategy "+in.StrategyID)
		return
	case !in.AutoMerge:
		// A merge now is refused by the approval check.
		s.refuse(w, r, http.StatusConflict, bbsError("pull.PullRequestMergeVetoedException", "Merging the pull request has been vetoed: it needs an approval."), "merge without autoMerge")
		return
	}
	p.AutoMerge = in.StrategyID
	if p.AutoMerge == "" {
		p.AutoMerge = "no-ff" // the repository's default strategy
	}
	writeJSON(w, http.StatusOK, b.json(s, p))
}
