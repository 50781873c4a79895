package forgestandin

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// NewAzureDevOps starts a stand-in for Azure DevOps' REST API 7.1 with one
// repository, org/project/repo. URL is its root (https://dev.azure.com/
// on the real service), where both the API and the web pages are:
// {org}/{project}/_git/{repo}/pullrequest/{id} is a request's page. self
// is the identity id of the personal access token's owner, who creates
// the requests; cfg.Username is ignored (a PAT goes by basic
// authentication with any user).
//
// What it serves, as documented ("Pull Requests", "Pull Request
// Threads"): GET and POST
// {org}/{project}/_apis/git/repositories/{repo}/pullrequests (the list by
// searchCriteria.sourceRefName, targetRefName and status, active by
// default; $top and $skip), GET and PATCH …/pullrequests/{id} (PATCH takes
// only the documented updatable properties: status, title, description of
// at most 4,000 characters, completionOptions, mergeOptions,
// autoCompleteSetBy.id, targetRefName, isDraft; others are refused with
// InvalidArgumentValueException), POST …/{id}/threads; every call with
// api-version; labels are tags; errors as {"$id", "innerException",
// "message", "typeName", "typeKey", "errorCode", "eventId"}; a request
// without credentials is answered with the sign-in page and 203.
//
// A branch policy needs a reviewer's approval and nobody votes here, so a
// request set to auto-complete stays active, and completing it is refused.
func NewAzureDevOps(t testing.TB, org, project, repo, self string, cfg Config) *Server {
	t.Helper()
	a := &azureDevOps{org: org, project: project, repo: repo, self: self}
	return start(t, "/", cfg, a.route)
}

type azureDevOps struct{ org, project, repo, self string }

const azRepositoryID = "3411ebc1-d5aa-464f-9615-0b527bc66719"

// azError is Azure DevOps' error shape.
func azError(typeKey, message string) any {
	return map[string]any{"$id": "1", "innerException": nil, "message": message,
		"typeName": "Microsoft.TeamFoundation.SourceControl.WebServer." + typeKey + ", Microsoft.TeamFoundation.SourceControl.WebServer",
		"typeKey":  typeKey, "errorCode": 0, "eventId": 3000}
}

func (a *azureDevOps) route(s *Server, w http.ResponseWriter, r *http.Request) {
	h := r.Header.Get("Authorization")
	if h == "" {
		s.refusals = append(s.refusals, r.Method+" "+r.URL.RequestURI()+": 203 no credentials")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNonAuthoritativeInfo)
		fmt.Fprint(w, "<!DOCTYPE html><html><head><title>Azure DevOps Services | Sign In</title></head><body>Sign In</body></html>")
		return
	}
	if _, pass, ok := r.BasicAuth(); !ok || pass != s.cfg.Token {
		s.refuse(w, r, http.StatusUnauthorized, azError("UnauthorizedRequestException",
			"TF400813: The user '' is not authorized to access this resource."), "Authorization "+h)
		return
	}
	switch v := r.URL.Query().Get("api-version"); v {
	case "7.0", "7.1":
	case "":
		s.refuse(w, r, http.StatusBadRequest, azError("VssVersionNotSpecifiedException", fmt.Sprintf(
			`No api-version was supplied for the %q request. The version must be supplied either as part of the Accept header (e.g. "application/json; api-version=1.0") or as a query parameter (e.g. "?api-version=1.0").`, r.Method)),
			"no api-version")
		return
	default:
		s.refuse(w, r, http.StatusBadRequest, azError("VssInvalidPreviewVersionException",
			"The requested version \""+v+"\" of the resource is not supported here."), "api-version "+v)
		return
	}
	parts, err := pathParts(r, "/")
	// The service reads its path segments without regard to case.
	is := func(i int, word string) bool { return len(parts) > i && strings.EqualFold(parts[i], word) }
	if err != nil || len(parts) < 6 || !is(2, "_apis") || !is(3, "git") || !is(4, "repositories") || !is(6, "pullrequests") {
		s.refuse(w, r, http.StatusNotFound, azError("ResourceNotFoundException", "The resource cannot be found: "+r.URL.Path), "no such API path")
		return
	}
	if parts[0] != a.org || !strings.EqualFold(parts[1], a.project) {
		s.refuse(w, r, http.StatusNotFound, azError("ProjectDoesNotExistWithNameException",
			"TF200016: The following project does not exist: "+parts[1]+"."), "another organization or project")
		return
	}
	if !strings.EqualFold(parts[5], a.repo) && parts[5] != azRepositoryID {
		s.refuse(w, r, http.StatusNotFound, azError("GitRepositoryNotFoundException",
			"TF401019: The Git repository with name or identifier "+parts[5]+" does not exist or you do not have permissions for the operation you are attempting."), "another repository")
		return
	}
	rest := parts[7:]
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		a.list(s, w, r)
	case len(rest) == 0 && r.Method == http.MethodPost:
		a.create(s, w, r)
	case len(rest) >= 1:
		id, err := strconv.Atoi(rest[0])
		p := s.pull(id)
		if err != nil || p == nil {
			s.refuse(w, r, http.StatusNotFound, azError("GitPullRequestNotFoundException",
				"TF401180: The requested pull request was not found."), "no pull request "+rest[0])
			return
		}
		switch {
		case len(rest) == 1 && r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, a.json(s, p))
		case len(rest) == 1 && r.Method == http.MethodPatch:
			a.update(s, w, r, p)
		case len(rest) == 2 && strings.EqualFold(rest[1], "threads") && r.Method == http.MethodPost:
			a.thread(s, w, r, p)
		default:
			s.refuse(w, r, http.StatusNotFound, azError("ResourceNotFoundException", "The resource cannot be found: "+r.URL.Path), "no such API path")
		}
	default:
		s.refuse(w, r, http.StatusMethodNotAllowed, azError("MethodNotAllowedException", "The requested resource does not support http method '"+r.Method+"'."), "method")
	}
}

func (a *azureDevOps) json(s *Server, p *Pull) map[string]any {
	reviewers := []any{}
	for _, id := range p.Reviewers {
		reviewers = append(reviewers, map[string]any{"id": id, "vote": 0, "hasDeclined": false, "isRequired": false})
	}
	labels := []any{}
	for i, l := range p.Labels {
		labels = append(labels, map[string]any{"id": fmt.Sprintf("00000000-0000-0000-0000-%012d", i+1), "name": l, "active": true})
	}
	api := fmt.Sprintf("%s%s/%s/_apis/git/repositories/%s/pullRequests/%d", s.URL, a.org, a.project, azRepositoryID, p.Number)
	m := map[string]any{
		"repository": map[string]any{"id": azRepositoryID, "name": a.repo,
			"project": map[string]any{"id": "6ce954b1-ce1f-45d1-b94d-e6bf2464ba2c", "name": a.project}},
		"pullRequestId": p.Number, "codeReviewId": p.Number, "status": p.State,
		"createdBy": map[string]any{"id": a.self, "displayName": "imagebot"},
		"title":     p.Title, "description": p.Body,
		"sourceRefName": "refs/heads/" + p.Head, "targetRefName": "refs/heads/" + p.Base,
		"mergeStatus": "succeeded", "isDraft": p.Draft, "reviewers": reviewers, "labels": labels,
		"url": api, "supportsIterations": true,
		"artifactId": fmt.Sprintf("vstfs:///Git/PullRequestId/%s%%2f%s%%2f%d", a.project, azRepositoryID, p.Number),
	}
	if c := s.commit(p.Head); c != "" {
		m["lastMergeSourceCommit"] = map[string]any{"commitId": c}
	}
	if c := s.commit(p.Base); c != "" {
		m["lastMergeTargetCommit"] = map[string]any{"commitId": c}
	}
	if p.AutoMerge != "" {
		m["autoCompleteSetBy"] = map[string]any{"id": p.AutoMergeSetBy}
		m["completionOptions"] = map[string]any{"mergeStrategy": p.AutoMerge}
	}
	return m
}

// The statuses a request may be searched by.
var azStatuses = []string{"active", "abandoned", "completed", "all", "notSet"}

func (a *azureDevOps) list(s *Server, w http.ResponseWriter, r *http.Request) {
	criteria := []string{"creatorId", "includeLinks", "repositoryId", "reviewerId", "sourceRefName", "sourceRepositoryId",
		"status", "targetRefName", "title", "minTime", "maxTime", "queryTimeRangeType"}
	allowed := []string{"api-version", "$top", "$skip"}
	for _, c := range criteria {
		allowed = append(allowed, "searchCriteria."+c)
	}
	if err := queryOnly(r, allowed...); err != nil {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", err.Error()), err.Error())
		return
	}
	q := r.URL.Query()
	status := q.Get("searchCriteria.status")
	if status == "" {
		status = "active"
	}
	if !slices.Contains(azStatuses, status) {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "searchCriteria.status "+status), "status "+status)
		return
	}
	source, target := q.Get("searchCriteria.sourceRefName"), q.Get("searchCriteria.targetRefName")
	for _, ref := range []string{source, target} {
		if ref != "" && !strings.HasPrefix(ref, "refs/") {
			s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "A ref name must be fully qualified: "+ref), "ref "+ref)
			return
		}
	}
	top, okTop := intParam(q, "$top", 101, 0, math.MaxInt)
	skip, okSkip := intParam(q, "$skip", 0, 0, math.MaxInt)
	for name, ok := range map[string]bool{"$top": okTop, "$skip": okSkip} {
		if !ok {
			s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", name+" "+q.Get(name)), name+" "+q.Get(name))
			return
		}
	}
	var match []*Pull
	for _, p := range s.pulls {
		if (status == "all" || p.State == status) && (source == "" || source == "refs/heads/"+p.Head) &&
			(target == "" || target == "refs/heads/"+p.Base) {
			match = append(match, p)
		}
	}
	slices.Reverse(match) // newest first
	from := min(skip, len(match))
	to := min(from+top, len(match))
	values := []any{}
	for _, p := range match[from:to] {
		values = append(values, a.json(s, p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"value": values, "count": len(values)})
}

// branchOf is the branch of a fully qualified ref.
func (a *azureDevOps) branchOf(field, ref string) (string, error) {
	b, ok := strings.CutPrefix(ref, "refs/heads/")
	if !ok || b == "" {
		return "", fmt.Errorf("%s %q is not a fully qualified branch (refs/heads/…)", field, ref)
	}
	return b, nil
}

type azIdentity struct {
	ID string `json:"id"`
}

type azCompletionOptions struct {
	MergeStrategy       string `json:"mergeStrategy,omitempty"`
	DeleteSourceBranch  bool   `json:"deleteSourceBranch,omitempty"`
	MergeCommitMessage  string `json:"mergeCommitMessage,omitempty"`
	BypassPolicy        bool   `json:"bypassPolicy,omitempty"`
	TransitionWorkItems bool   `json:"transitionWorkItems,omitempty"`
}

// The merge strategies of completionOptions.mergeStrategy.
var azStrategies = []string{"noFastForward", "squash", "rebase", "rebaseMerge"}

func (a *azureDevOps) create(s *Server, w http.ResponseWriter, r *http.Request) {
	var in struct {
		SourceRefName string `json:"sourceRefName"`
		TargetRefName string `json:"targetRefName"`
		Title         string `json:"title"`
		Description   string `json:"description"`
		IsDraft       bool   `json:"isDraft"`
		Reviewers     []struct {
			ID         string `json:"id"`
			IsRequired bool   `json:"isRequired"`
		} `json:"reviewers"`
		Labels []struct {
			Name string `json:"name"`
		} `json:"labels"`
		WorkItemRefs []struct {
			ID string `json:"id"`
		} `json:"workItemRefs"`
		CompletionOptions *azCompletionOptions `json:"completionOptions"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", err.Error()), err.Error())
		return
	}
	head, err := a.branchOf("sourceRefName", in.SourceRefName)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", err.Error()), err.Error())
		return
	}
	base, err := a.branchOf("targetRefName", in.TargetRefName)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", err.Error()), err.Error())
		return
	}
	switch {
	case strings.TrimSpace(in.Title) == "":
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "The title of a pull request is required."), "no title")
		return
	case utf8.RuneCountInString(in.Description) > 4000:
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "The description is longer than 4000 characters."), "description too long")
		return
	case s.commit(head) == "" || s.commit(base) == "":
		s.refuse(w, r, http.StatusBadRequest, azError("GitPullRequestCannotBeActivated",
			"TF401398: The pull request cannot be activated because the source and/or the target branch no longer exists, or the requested refs are not branches"),
			"no such branch in git")
		return
	case s.openFrom(head, base) != nil:
		s.refuse(w, r, http.StatusConflict, azError("GitPullRequestExistsException",
			"TF401179: An active pull request for the source and target branch already exists."), "duplicate")
		return
	}
	p := &Pull{Title: in.Title, Body: in.Description, Head: head, Base: base, State: "active", Draft: in.IsDraft}
	for _, rv := range in.Reviewers {
		if !s.knownUser(rv.ID) {
			s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "The identity "+rv.ID+" is not known."), "reviewer "+rv.ID)
			return
		}
		p.Reviewers = append(p.Reviewers, rv.ID)
	}
	for _, l := range in.Labels {
		if strings.TrimSpace(l.Name) == "" {
			s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "A tag needs a name."), "blank label")
			return
		}
		p.Labels = append(p.Labels, l.Name)
	}
	s.add(p)
	p.URL = fmt.Sprintf("%s%s/%s/_git/%s/pullrequest/%d", s.URL, a.org, a.project, a.repo, p.Number)
	writeJSON(w, http.StatusCreated, a.json(s, p))
}

func (a *azureDevOps) update(s *Server, w http.ResponseWriter, r *http.Request, p *Pull) {
	var in struct {
		Status            *string              `json:"status"`
		Title             *string              `json:"title"`
		Description       *string              `json:"description"`
		CompletionOptions *azCompletionOptions `json:"completionOptions"`
		MergeOptions      map[string]any       `json:"mergeOptions"`
		AutoCompleteSetBy *azIdentity          `json:"autoCompleteSetBy"`
		TargetRefName     *string              `json:"targetRefName"`
		IsDraft           *bool                `json:"isDraft"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", err.Error()), err.Error())
		return
	}
	if p.State != "active" && (in.Status == nil || *in.Status != "active") {
		s.refuse(w, r, http.StatusConflict, azError("GitPullRequestNotEditableException",
			"TF401181: The pull request cannot be edited due to its state."), "update of a "+p.State+" request")
		return
	}
	if in.Description != nil && utf8.RuneCountInString(*in.Description) > 4000 {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "The description is longer than 4000 characters."), "description too long")
		return
	}
	if in.CompletionOptions != nil && in.CompletionOptions.MergeStrategy != "" && !slices.Contains(azStrategies, in.CompletionOptions.MergeStrategy) {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "mergeStrategy "+in.CompletionOptions.MergeStrategy), "strategy")
		return
	}
	if in.AutoCompleteSetBy != nil && in.AutoCompleteSetBy.ID != a.self && in.AutoCompleteSetBy.ID != "" {
		// Auto-complete is set by the caller, for themselves.
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException",
			"autoCompleteSetBy "+in.AutoCompleteSetBy.ID+" is not the identity of the caller"), "autoCompleteSetBy")
		return
	}
	if in.Status != nil {
		switch *in.Status {
		case "active", "abandoned":
			p.State = *in.Status
		case "completed":
			s.refuse(w, r, http.StatusConflict, azError("GitPullRequestPolicyRejectedException",
				"TF402455: The policy requires an approval from a reviewer."), "complete")
			return
		default:
			s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "status "+*in.Status), "status "+*in.Status)
			return
		}
	}
	if in.Title != nil {
		p.Title = *in.Title
		p.Edits++
	}
	if in.Description != nil {
		p.Body = *in.Description
	}
	if in.IsDraft != nil {
		p.Draft = *in.IsDraft
	}
	if in.AutoCompleteSetBy != nil {
		p.AutoMergeSetBy = in.AutoCompleteSetBy.ID
		p.AutoMerge = "noFastForward"
		if in.AutoCompleteSetBy.ID == "" {
			p.AutoMerge = "" // an empty id turns auto-complete off
		}
	}
	if in.CompletionOptions != nil && in.CompletionOptions.MergeStrategy != "" && p.AutoMergeSetBy != "" {
		p.AutoMerge = in.CompletionOptions.MergeStrategy
	}
	writeJSON(w, http.StatusOK, a.json(s, p))
}

func (a *azureDevOps) thread(s *Server, w http.ResponseWriter, r *http.Request, p *Pull) {
	var in struct {
		Comments []struct {
			ParentCommentID int    `json:"parentCommentId"`
			Content         string `json:"content"`
			CommentType     string `json:"commentType"`
		} `json:"comments"`
		Status     string         `json:"status"`
		Properties map[string]any `json:"properties"`
	}
	if err := decode(r, &in); err != nil {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", err.Error()), err.Error())
		return
	}
	if len(in.Comments) == 0 {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "A thread needs a comment."), "no comment")
		return
	}
	if in.Status != "" && !slices.Contains([]string{"active", "byDesign", "closed", "fixed", "pending", "unknown", "wontFix"}, in.Status) {
		s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "status "+in.Status), "thread status "+in.Status)
		return
	}
	var comments []any
	for i, c := range in.Comments {
		if strings.TrimSpace(c.Content) == "" || (c.CommentType != "" && !slices.Contains([]string{"text", "codeChange", "system", "unknown"}, c.CommentType)) {
			s.refuse(w, r, http.StatusBadRequest, azError("InvalidArgumentValueException", "comment "+strconv.Itoa(i)), "comment")
			return
		}
		p.Comments = append(p.Comments, c.Content)
		comments = append(comments, map[string]any{"id": i + 1, "parentCommentId": c.ParentCommentID, "content": c.Content,
			"commentType": c.CommentType, "author": map[string]any{"id": a.self}})
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": len(p.Comments), "comments": comments, "status": in.Status})
}
