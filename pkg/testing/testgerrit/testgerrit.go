// Package testgerrit runs a stand-in for Gerrit Code Review in tests.
// Gerrit (a Java server) cannot run here, so the stand-in is a real git
// server (testgit's git http-backend) whose receive hooks do what Gerrit
// does with a push to refs/for/BRANCH, as its documentation
// (gerrit-review.googlesource.com/Documentation/user-upload.html) says:
// the commit must carry a Change-Id trailer (I and 40 hex digits) in its
// message's last paragraph; a push for a closed change, or of a commit
// that is a patch set already ("no new changes"), is refused; no
// refs/for ref is kept. Every push the hooks take is recorded with the
// ref it went to, options and all. Over those records a REST API answers
// the calls of Gerrit's documented changes API that an update stream
// makes (rest-api-changes.html: query changes with CURRENT_REVISION and
// CURRENT_COMMIT, abandon), behind the ")]}'" guard and HTTP basic
// authentication under /a/, and each patch set gets its
// refs/changes/NN/N/P ref.
package testgerrit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// The user and HTTP password of New's stand-in, for git and the REST API.
const (
	Username = "automation"
	Password = "http-password"
)

// Options are the user and HTTP password the REST API takes.
type Options struct {
	Username, Password string
}

// Server is a Gerrit stand-in for one project.
type Server struct {
	// Git is the git server; GitURL the project's repository on it (New's
	// own; nil and empty when attached).
	Git    *testgit.Server
	GitURL string
	// APIURL is the REST API's root for authenticated calls (…/a/).
	APIURL  string
	Project string
	// Clone is a work clone of the project, to change main past the
	// stand-in (its origin is the bare repository on disk); New's only.
	Clone *testgit.Clone

	bare      string
	opts      Options
	mu        sync.Mutex
	abandoned map[string]string // Change-Id → the abandon's message
	calls     []string
}

// PatchSet is one pushed commit of a change.
type PatchSet struct {
	Number int
	Commit string
	// Ref is the ref the push went to, options included
	// (refs/for/main%topic=x,r=alice).
	Ref string
}

// Change is what the pushes made of one Change-Id.
type Change struct {
	Number    int
	ChangeID  string
	Branch    string
	Topic     string
	Hashtags  []string
	Reviewers []string
	WIP       bool
	Status    string // NEW or ABANDONED
	// AbandonMessage is the abandon's message, when abandoned.
	AbandonMessage string
	PatchSets      []PatchSet
}

// The hooks. pre-receive refuses what Gerrit refuses and records the rest
// in pushes.log (ref, Change-Id, commit); post-receive drops the refs/for
// refs, which Gerrit never keeps. closed lists abandoned Change-Ids.
const preReceive = `#!/bin/sh
while read old new ref; do
  case "$ref" in
  refs/for/*)
    id=$(git log -1 --format='%(trailers:key=Change-Id,valueonly)' "$new" | head -n 1)
    if ! printf '%s\n' "$id" | grep -Eq '^I[0-9a-f]{40}$'; then
      echo "ERROR: commit ${new}: missing Change-Id in message footer" >&2
      exit 1
    fi
    if [ -f closed ] && grep -qx "$id" closed; then
      echo "ERROR: change $id closed" >&2
      exit 1
    fi
    if [ -f pushes.log ] && grep -q " $new\$" pushes.log; then
      echo "ERROR: no new changes" >&2
      exit 1
    fi
    echo "$ref $id $new" >> pushes.log
    ;;
  refs/heads/*) ;;
  *)
    echo "ERROR: $ref: only refs/for/* and branches are taken" >&2
    exit 1
    ;;
  esac
done
`

const postReceive = `#!/bin/sh
while read old new ref; do
  case "$ref" in
  refs/for/*) git update-ref -d "$ref" ;;
  esac
done
`

// New starts the stand-in on a git server of its own, with a project of
// files on main, for user Username with HTTP password Password.
func New(t testing.TB, project string, files map[string]string) *Server {
	t.Helper()
	g := testgit.New(t, testgit.Options{Username: Username, Password: Password})
	clone := g.CreateRepo(t, project, files)
	s := Attach(t, g.BarePath(project), project, Options{Username: Username, Password: Password})
	s.Git, s.GitURL, s.Clone = g, g.RepoURL(project), clone
	return s
}

// Attach makes the bare repository of a git server that serves it (a
// test's chain) project on a Gerrit stand-in: it installs the hooks and
// starts the REST API, stopped at the end of the test.
func Attach(t testing.TB, bare, project string, o Options) *Server {
	t.Helper()
	s := &Server{Project: project, bare: bare, opts: o, abandoned: map[string]string{}}
	for name, text := range map[string]string{"pre-receive": preReceive, "post-receive": postReceive} {
		if err := os.WriteFile(filepath.Join(bare, "hooks", name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	api := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(api.Close)
	s.APIURL = api.URL + "/a/"
	return s
}

// Calls are the REST calls served, as "METHOD path".
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Changes are the project's changes, by number.
func (s *Server) Changes(t testing.TB) []Change {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, err := s.changes()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// changes reads pushes.log in order: a Change-Id's first push opens a
// change, each later one is its next patch set, and its options (the
// latest topic, every hashtag and reviewer) apply to it.
func (s *Server) changes() ([]Change, error) {
	data, err := os.ReadFile(filepath.Join(s.bare, "pushes.log"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var out []Change
	byID := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		ref, id, commit := f[0], f[1], f[2]
		branch, opts, _ := strings.Cut(strings.TrimPrefix(ref, "refs/for/"), "%")
		i, ok := byID[id]
		if !ok {
			out = append(out, Change{Number: len(out) + 1, ChangeID: id, Branch: branch, Status: "NEW"})
			i = len(out) - 1
			byID[id] = i
		}
		c := &out[i]
		c.WIP = false
		for _, o := range strings.Split(opts, ",") {
			k, v, _ := strings.Cut(o, "=")
			switch k {
			case "topic":
				c.Topic = v
			case "hashtag", "t":
				if !slices.Contains(c.Hashtags, v) {
					c.Hashtags = append(c.Hashtags, v)
				}
			case "r":
				if !slices.Contains(c.Reviewers, v) {
					c.Reviewers = append(c.Reviewers, v)
				}
			case "wip":
				c.WIP = true
			}
		}
		ps := PatchSet{Number: len(c.PatchSets) + 1, Commit: commit, Ref: ref}
		c.PatchSets = append(c.PatchSets, ps)
		changeRef := fmt.Sprintf("refs/changes/%02d/%d/%d", c.Number%100, c.Number, ps.Number)
		if err := s.git("update-ref", changeRef, commit); err != nil {
			return nil, err
		}
	}
	for i := range out {
		if msg, ok := s.abandoned[out[i].ChangeID]; ok {
			out[i].Status, out[i].AbandonMessage = "ABANDONED", msg
		}
	}
	return out, nil
}

func (s *Server) git(args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = s.bare
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// answer writes v as Gerrit does: ")]}'", a newline, the JSON.
func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	data, _ := json.Marshal(v)
	fmt.Fprintf(w, ")]}'\n%s\n", data)
}

// refuse writes a refusal as Gerrit does: plain text.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, req.Method+" "+req.URL.EscapedPath())
	user, pass, ok := req.BasicAuth()
	if !strings.HasPrefix(req.URL.Path, "/a/") || !ok || user != s.opts.Username || pass != s.opts.Password {
		refuse(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	switch {
	case req.Method == http.MethodGet && req.URL.Path == "/a/changes/":
		s.query(w, req)
	case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/abandon"):
		s.abandon(w, req)
	default:
		refuse(w, http.StatusNotFound, "Not found: "+req.URL.Path)
	}
}

var term = regexp.MustCompile(`(\w+):("(?:[^"\\]|\\.)*"|\S+)`)

// query answers GET /changes/?q=… with the changes every term matches
// (topic, status:open, project, branch, change); revisions come only with
// the CURRENT_REVISION option, their commits with CURRENT_COMMIT.
func (s *Server) query(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	terms := map[string]string{}
	for _, m := range term.FindAllStringSubmatch(q.Get("q"), -1) {
		v := m[2]
		if strings.HasPrefix(v, `"`) {
			var err error
			if v, err = strconv.Unquote(v); err != nil {
				refuse(w, http.StatusBadRequest, "bad query: "+m[0])
				return
			}
		}
		terms[m[1]] = v
	}
	changes, err := s.changes()
	if err != nil {
		refuse(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := []map[string]any{}
	for _, c := range changes {
		if !matches(c, s.Project, terms) {
			continue
		}
		info, err := s.info(c, slices.Contains(q["o"], "CURRENT_REVISION"), slices.Contains(q["o"], "CURRENT_COMMIT"))
		if err != nil {
			refuse(w, http.StatusInternalServerError, err.Error())
			return
		}
		out = append(out, info)
	}
	answer(w, out)
}

func matches(c Change, project string, terms map[string]string) bool {
	for k, v := range terms {
		var ok bool
		switch k {
		case "topic":
			ok = c.Topic == v
		case "status":
			ok = (v == "open" && c.Status == "NEW") || strings.EqualFold(v, c.Status)
		case "project":
			ok = project == v
		case "branch":
			ok = c.Branch == v
		case "change":
			ok = c.ChangeID == v || strconv.Itoa(c.Number) == v
		}
		if !ok {
			return false
		}
	}
	return true
}

// info is c as a ChangeInfo.
func (s *Server) info(c Change, revision, commit bool) (map[string]any, error) {
	cur := c.PatchSets[len(c.PatchSets)-1]
	meta, err := s.commit(cur.Commit)
	if err != nil {
		return nil, err
	}
	info := map[string]any{
		"id": s.Project + "~" + strconv.Itoa(c.Number), "project": s.Project, "branch": c.Branch,
		"topic": c.Topic, "hashtags": c.Hashtags, "change_id": c.ChangeID, "subject": meta["subject"],
		"status": c.Status, "_number": c.Number, "work_in_progress": c.WIP,
	}
	if !revision {
		return info, nil
	}
	rev := map[string]any{"_number": cur.Number, "ref": fmt.Sprintf("refs/changes/%02d/%d/%d", c.Number%100, c.Number, cur.Number)}
	if commit {
		rev["commit"] = meta
	}
	info["current_revision"] = cur.Commit
	info["revisions"] = map[string]any{cur.Commit: rev}
	return info, nil
}

// commit is a CommitInfo of the bare repository's commit: parents,
// author and committer (date in UTC, tz in minutes), subject and message.
func (s *Server) commit(id string) (map[string]any, error) {
	cmd := exec.Command("git", "cat-file", "commit", id)
	cmd.Dir = s.bare
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git cat-file commit %s: %v", id, err)
	}
	header, message, _ := strings.Cut(string(out), "\n\n")
	info := map[string]any{"commit": id, "message": message}
	subject, _, _ := strings.Cut(message, "\n")
	info["subject"] = subject
	parents := []map[string]string{}
	for _, line := range strings.Split(header, "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "parent":
			parents = append(parents, map[string]string{"commit": v})
		case "author", "committer":
			p, err := person(v)
			if err != nil {
				return nil, err
			}
			info[k] = p
		}
	}
	info["parents"] = parents
	return info, nil
}

var personLine = regexp.MustCompile(`^(.*) <(.*)> (\d+) ([+-])(\d\d)(\d\d)$`)

// person is a GitPersonInfo of "Name <email> 1700000000 +0100".
func person(v string) (map[string]any, error) {
	m := personLine.FindStringSubmatch(v)
	if m == nil {
		return nil, fmt.Errorf("unreadable person %q", v)
	}
	secs, _ := strconv.ParseInt(m[3], 10, 64)
	hh, _ := strconv.Atoi(m[5])
	mm, _ := strconv.Atoi(m[6])
	tz := hh*60 + mm
	if m[4] == "-" {
		tz = -tz
	}
	return map[string]any{"name": m[1], "email": m[2],
		"date": time.Unix(secs, 0).UTC().Format("2006-01-02 15:04:05.000000000"), "tz": tz}, nil
}

// abandon answers POST /changes/{project~number}/abandon: an open change
// is abandoned with the input's message; a closed one is refused with
// 409, as Gerrit refuses it.
func (s *Server) abandon(w http.ResponseWriter, req *http.Request) {
	id := strings.TrimSuffix(strings.TrimPrefix(req.URL.Path, "/a/changes/"), "/abandon")
	project, number, ok := strings.Cut(id, "~")
	var in struct {
		Message string `json:"message"`
	}
	if !ok || project != s.Project || json.NewDecoder(req.Body).Decode(&in) != nil {
		refuse(w, http.StatusBadRequest, "want POST /changes/PROJECT~NUMBER/abandon with an AbandonInput")
		return
	}
	changes, err := s.changes()
	if err != nil {
		refuse(w, http.StatusInternalServerError, err.Error())
		return
	}
	for _, c := range changes {
		if strconv.Itoa(c.Number) != number {
			continue
		}
		if c.Status != "NEW" {
			refuse(w, http.StatusConflict, "change is "+strings.ToLower(c.Status))
			return
		}
		s.abandoned[c.ChangeID] = in.Message
		f, err := os.OpenFile(filepath.Join(s.bare, "closed"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = fmt.Fprintln(f, c.ChangeID)
			f.Close()
		}
		if err != nil {
			refuse(w, http.StatusInternalServerError, err.Error())
			return
		}
		c.Status = "ABANDONED"
		info, err := s.info(c, false, false)
		if err != nil {
			refuse(w, http.StatusInternalServerError, err.Error())
			return
		}
		answer(w, info)
		return
	}
	refuse(w, http.StatusNotFound, "Not found: "+id)
}
