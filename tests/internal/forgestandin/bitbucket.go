package forgestandin

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// NewBitbucket starts a stand-in for Bitbucket Cloud's REST API 2.0 with
// one repository, workspace/repo, whose main branch is main. URL is its
// API root, https://api.bitbucket.org/2.0/ on the real forge; the web
// pages are under Web as bitbucket.org's are (WORKSPACE/REPO/pull-requests/N).
//
// What it serves, as documented: GET and POST
// /repositories/{workspace}/{repo_slug}/pullrequests (the list filtered by
// state, repeatable, OPEN by default, and by the q query language's
// "field = \"value\"" terms joined with AND; paged by page and pagelen, at
// most 50, with a next link while more remain); GET and PUT …/{id}, PUT
// with the title and replacing the reviewers, none when it names none; POST
// …/{id}/comments (content.raw); POST …/{id}/decline; errors as
// {"type": "error", "error": {"message": …, "detail": …}}. Pull requests
// here have no labels, assignees or auto-merge, as on Bitbucket Cloud.
func NewBitbucket(t testing.TB, workspace, repo string, cfg Config) *Server {
	t.Helper()
	bb := &bitbucket{workspace: workspace, repo: repo}
	return start(t, "/2.0/", cfg, bb.route)
}

type bitbucket struct{ workspace, repo string }

const bitbucketMaxPagelen = 50

// bbError is Bitbucket Cloud's error shape.
func bbError(message, detail string) any {
	e := map[string]any{"message": message}
	if detail != "" {
		e["detail"] = detail
	}
	return map[string]any{"type": "error", "error": e}
}

func (bb *bitbucket) route(s *Server, w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		s.refuse(w, r, http.StatusUnauthorized, bbError("Token is invalid, expired, or not supported for this endpoint.", ""),
			"Authorization "+r.Header.Get("Authorization"))
		return
	}
	parts, err := pathParts(r, "/2.0/")
	if err != nil || len(parts) < 4 || parts[0] != "repositories" || parts[3] != "pullrequests" {
		s.refuse(w, r, http.StatusNotFound, bbError("Resource not found", ""), "no such API path")
		return
	}
	if parts[1] != bb.workspace || parts[2] != bb.repo {
		s.refuse(w, r, http.StatusNotFound, bbError("Repository "+parts[1]+"/"+parts[2]+" not found", ""), "another repository")
		return
	}
	rest := parts[4:]
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		bb.list(s, w, r)
	case len(rest) == 0 && r.Method == http.MethodPost:
		bb.create(s, w, r)
	case len(rest) >= 1:
		id, err := strconv.Atoi(rest[0])
		p := s.pull(id)
		if err != nil || p == nil {
			s.refuse(w, r, http.StatusNotFound, bbError("Pull request not found", ""), "no pull request "+rest[0])
			return
		}
		switch {
		case len(rest) == 1 && r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, bb.json(s, p))
		case len(rest) == 1 && r.Method == http.MethodPut:
			bb.edit(s, w, r, p)
		case len(rest) == 2 && rest[1] == "comments" && r.Method == http.MethodPost:
			bb.comment(s, w, r, p)
		case len(rest) == 2 && rest[1] == "decline" && r.Method == http.MethodPost:
			bb.decline(s, w, r, p)
		default:
			s.refuse(w, r, http.StatusNotFound, bbError("Resource not found", ""), "no such API path")
		}
	default:
		s.refuse(w, r, http.StatusMethodNotAllowed, bbError("Method not allowed", ""), "method")
	}
}

// pathParts splits the request's path under prefix into its unescaped
// segments.
func pathParts(r *http.Request, prefix string) ([]string, error) {
	p, ok := strings.CutPrefix(r.URL.EscapedPath(), prefix)
	if !ok {
		return nil, fmt.Errorf("not under %s", prefix)
	}
	parts := strings.Split(strings.TrimSuffix(p, "/"), "/")
	for i, part := range parts {
		u, err := url.PathUnescape(part)
		if err != nil {
			return nil, err
		}
		parts[i] = u
	}
	return parts, nil
}

// json is a pull request as the API answers it, trimmed to what a client
// of the documented schema reads. A list leaves out the reviewers: "for
// performance reasons, the API only includes this list on a pull
// request's self URL".
func (bb *bitbucket) json(s *Server, p *Pull) map[string]any {
	m := bb.listed(s, p)
	var reviewers []any
	for _, r := range p.Reviewers {
		key := "account_id"
		if strings.HasPrefix(r, "{") {
			key = "uuid"
		}
		reviewers = append(reviewers, map[string]any{"type": "user", key: r})
	}
	m["reviewers"] = reviewers
	return m
}

// listed is a pull request as a list has it.
func (bb *bitbucket) listed(s *Server, p *Pull) map[string]any {
	ref := func(branch string) map[string]any {
		m := map[string]any{"branch": map[string]any{"name": branch},
			"repository": map[string]any{"type": "repository", "full_name": bb.workspace + "/" + bb.repo}}
		// Bitbucket Cloud names a pull request's commits by 12-digit
		// abbreviated hashes.
		if c := s.commit(branch); c != "" {
			m["commit"] = map[string]any{"type": "commit", "hash": c[:min(12, len(c))]}
		}
		return m
	}
	self := fmt.Sprintf("%srepositories/%s/%s/pullrequests/%d", s.URL, bb.workspace, bb.repo, p.Number)
	return map[string]any{
		"type": "pullrequest", "id": p.Number, "title": p.Title, "description": p.Body,
		"summary": map[string]any{"raw": p.Body, "markup": "markdown"},
		"state":   p.State, "draft": p.Draft, "source": ref(p.Head), "destination": ref(p.Base),
		"comment_count": len(p.Comments), "task_count": 0, "close_source_branch": false,
		"links": map[string]any{
			"self":     map[string]any{"href": self},
			"html":     map[string]any{"href": p.URL},
			"comments": map[string]any{"href": self + "/comments"},
			"decline":  map[string]any{"href": self + "/decline"},
		},
	}
}

func (bb *bitbucket) list(s *Server, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := queryOnly(r, "state", "q", "sort", "page", "pagelen"); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbError("Invalid query", err.Error()), err.Error())
		return
	}
	states := q["state"]
	if len(states) == 0 {
		states = []string{"OPEN"}
	}
	for _, st := range states {
		if !slices.Contains([]string{"OPEN", "MERGED", "DECLINED", "SUPERSEDED"}, st) {
			s.refuse(w, r, http.StatusBadRequest, bbError("Invalid state", st+" is not one of OPEN, MERGED, DECLINED, SUPERSEDED"), "state "+st)
			return
		}
	}
	pagelen, ok := intParam(q, "pagelen", 10, 1, bitbucketMaxPagelen)
	if !ok {
		s.refuse(w, r, http.StatusBadRequest, bbError("Invalid pagelen", fmt.Sprintf("pagelen must be between 1 and %d", bitbucketMaxPagelen)), "pagelen "+q.Get("pagelen"))
		return
	}
	page, ok := intParam(q, "page", 1, 1, math.MaxInt)
	if !ok {
		s.refuse(w, r, http.StatusBadRequest, bbError("Invalid page", q.Get("page")), "page "+q.Get("page"))
		return
	}
	filter, err := parseBBQL(q.Get("q"))
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbError("Invalid query", err.Error()), "q: "+err.Error())
		return
	}
	var match []*Pull
	for _, p := range s.pulls {
		if slices.Contains(states, p.State) && filter(p) {
			match = append(match, p)
		}
	}
	slices.Reverse(match) // newest first
	from := min((page-1)*pagelen, len(match))
	to := min(from+pagelen, len(match))
	values := []any{}
	for _, p := range match[from:to] {
		values = append(values, bb.listed(s, p))
	}
	out := map[string]any{"size": len(match), "page": page, "pagelen": pagelen, "values": values}
	if to < len(match) {
		next := r.URL.Query()
		next.Set("page", strconv.Itoa(page+1))
		out["next"] = s.Web + r.URL.Path + "?" + next.Encode()
	}
	writeJSON(w, http.StatusOK, out)
}

// parseBBQL reads the part of Bitbucket's query language a pull request
// list takes here: terms FIELD = "VALUE" joined with AND, over
// source.branch.name, destination.branch.name, state and title. Anything
// else is refused, as the API refuses what it cannot parse.
func parseBBQL(q string) (func(*Pull) bool, error) {
	if strings.TrimSpace(q) == "" {
		return func(*Pull) bool { return true }, nil
	}
	fields := map[string]func(*Pull) string{
		"source.branch.name":      func(p *Pull) string { return p.Head },
		"destination.branch.name": func(p *Pull) string { return p.Base },
		"state":                   func(p *Pull) string { return p.State },
		"title":                   func(p *Pull) string { return p.Title },
	}
	type term struct {
		field func(*Pull) string
		value string
	}
	var terms []term
	rest := strings.TrimSpace(q)
	for {
		i := strings.IndexFunc(rest, func(r rune) bool { return unicode.IsSpace(r) || r == '=' })
		if i <= 0 {
			return nil, fmt.Errorf("expected FIELD = \"VALUE\" at %q", rest)
		}
		name := rest[:i]
		get, ok := fields[name]
		if !ok {
			return nil, fmt.Errorf("%q is not a field of a pull request here", name)
		}
		rest = strings.TrimSpace(rest[i:])
		if !strings.HasPrefix(rest, "=") {
			return nil, fmt.Errorf("expected = after %s", name)
		}
		rest = strings.TrimSpace(rest[1:])
		value, after, err := quoted(rest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		terms = append(terms, term{get, value})
		rest = strings.TrimSpace(after)
		if rest == "" {
			break
		}
		and, ok := strings.CutPrefix(rest, "AND ")
		if !ok {
			return nil, fmt.Errorf("expected AND at %q", rest)
		}
		rest = strings.TrimSpace(and)
	}
	return func(p *Pull) bool {
		for _, t := range terms {
			if t.field(p) != t.value {
				return false
			}
		}
		return true
	}, nil
}

// quoted reads a double-quoted string with backslash escapes at the start
// of s, and returns it and what follows.
func quoted(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", fmt.Errorf("expected a double-quoted value at %q", s)
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			v, err := strconv.Unquote(s[:i+1])
			return v, s[i+1:], err
		}
	}
	return "", "", fmt.Errorf("unterminated value %q", s)
}

type bbBranchRef struct {
	Branch *struct {
		Name string `json:"name"`
	} `json:"branch"`
	Commit *struct {
		Hash string `json:"hash"`
	} `json:"commit,omitempty"`
	Repository *struct {
		FullName string `json:"full_name"`
	} `json:"repository,omitempty"`
}

type bbUser struct {
	UUID      string `json:"uuid,omitempty"`
	AccountID string `json:"account_id,omitempty"`
}

func (bb *bitbucket) reviewers(s *Server, in []bbUser) ([]string, error) {
	var out []string
	for _, u := range in {
		id := u.AccountID
		if u.UUID != "" {
			id = u.UUID
		}
		if id == "" || (u.UUID != "" && u.AccountID != "") {
			return nil, fmt.Errorf("a reviewer is named by one of uuid or account_id: %+v", u)
		}
		if !s.knownUser(id) {
			return nil, fmt.Errorf("%s is not a user of this workspace", id)
		}
		out = append(out, id)
	}
	return out, nil
}

func (bb *bitbucket) create(s *Server, w http.ResponseWriter, r *http.Request) {
	var in struct {
		Title             string       `json:"title"`
		Description       string       `json:"description"`
		Source            *bbBranchRef `json:"source"`
		Destination       *bbBranchRef `json:"destination"`
		Reviewers         []bbUser     `json:"reviewers"`
		Draft             bool         `json:"draft"`
		CloseSourceBranch bool         `json:"close_source_branch"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", err.Error()), err.Error())
		return
	}
	base := "main"
	if in.Destination != nil && in.Destination.Branch != nil {
		base = in.Destination.Branch.Name
	}
	switch {
	case in.Title == "":
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "title: This field is required."), "no title")
		return
	case in.Source == nil || in.Source.Branch == nil || in.Source.Branch.Name == "":
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "source: This field is required."), "no source branch")
		return
	case s.commit(in.Source.Branch.Name) == "":
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "source: branch "+in.Source.Branch.Name+" not found"), "no source branch in git")
		return
	case s.commit(base) == "":
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "destination: branch "+base+" not found"), "no destination branch in git")
		return
	case s.commit(in.Source.Branch.Name) == s.commit(base):
		s.refuse(w, r, http.StatusBadRequest, bbError("There are no changes to be pulled", ""), "source is destination")
		return
	case s.openFrom(in.Source.Branch.Name, base) != nil:
		// The stand-in refuses a second open request of a pair, so that
		// a job that failed to find its own cannot pass by opening
		// another.
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "there is already an open pull request from "+in.Source.Branch.Name+" to "+base), "duplicate")
		return
	}
	reviewers, err := bb.reviewers(s, in.Reviewers)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "reviewers: "+err.Error()), err.Error())
		return
	}
	p := s.add(&Pull{Title: in.Title, Body: in.Description, Head: in.Source.Branch.Name, Base: base, State: "OPEN",
		Draft: in.Draft, Reviewers: reviewers})
	p.URL = fmt.Sprintf("%s/%s/%s/pull-requests/%d", s.Web, bb.workspace, bb.repo, p.Number)
	writeJSON(w, http.StatusCreated, bb.json(s, p))
}

func (bb *bitbucket) edit(s *Server, w http.ResponseWriter, r *http.Request, p *Pull) {
	var in struct {
		Title       *string      `json:"title"`
		Description *string      `json:"description"`
		Reviewers   *[]bbUser    `json:"reviewers"`
		Destination *bbBranchRef `json:"destination"`
		Draft       *bool        `json:"draft"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", err.Error()), err.Error())
		return
	}
	if !p.Open() {
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "only an open pull request can be updated"), "edit of a "+p.State+" request")
		return
	}
	// An update names the title, which it must, as Atlassian's answers on
	// the endpoint say.
	if in.Title == nil || *in.Title == "" {
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "title: This field is required."), "no title")
		return
	}
	p.Title = *in.Title
	if in.Description != nil {
		p.Body = *in.Description
	}
	// PUT replaces the reviewers: an update that leaves them out leaves
	// the request with none, as the endpoint's documentation has it
	// ("omitting a parameter causes the server to drop the existing
	// value") and Bitbucket does.
	p.Reviewers = nil
	if in.Reviewers != nil {
		reviewers, err := bb.reviewers(s, *in.Reviewers)
		if err != nil {
			s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "reviewers: "+err.Error()), err.Error())
			return
		}
		p.Reviewers = reviewers
	}
	if in.Draft != nil {
		p.Draft = *in.Draft
	}
	p.Edits++
	writeJSON(w, http.StatusOK, bb.json(s, p))
}

func (bb *bitbucket) comment(s *Server, w http.ResponseWriter, r *http.Request, p *Pull) {
	var in struct {
		Content *struct {
			Raw string `json:"raw"`
		} `json:"content"`
		Parent *struct {
			ID int `json:"id"`
		} `json:"parent"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", err.Error()), err.Error())
		return
	}
	if in.Content == nil || strings.TrimSpace(in.Content.Raw) == "" {
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "content: This field is required."), "no content.raw")
		return
	}
	p.Comments = append(p.Comments, in.Content.Raw)
	writeJSON(w, http.StatusCreated, map[string]any{"type": "pullrequest_comment", "id": len(p.Comments),
		"content": map[string]any{"raw": in.Content.Raw, "markup": "markdown"}})
}

func (bb *bitbucket) decline(s *Server, w http.ResponseWriter, r *http.Request, p *Pull) {
	if err := noBody(r); err != nil {
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", err.Error()), err.Error())
		return
	}
	if !p.Open() {
		s.refuse(w, r, http.StatusBadRequest, bbError("Bad request", "the pull request is "+p.State+", not open"), "decline of a "+p.State+" request")
		return
	}
	p.State = "DECLINED"
	writeJSON(w, http.StatusOK, bb.json(s, p))
}
