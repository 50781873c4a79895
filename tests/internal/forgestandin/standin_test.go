package forgestandin

// The stand-ins must be able to fail a test: each refuses a wrong token,
// a path it does not serve, a body field outside the documented schema
// and a second open request of a branch pair, in the forge's error shape,
// and records the refusal; it takes the documented request.

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

const testToken = "standin-test-token"

// branches is a repository with main and a head branch one commit ahead.
func branches(name string) (string, bool) {
	switch name {
	case "main":
		return "1111111111111111111111111111111111111111", true
	case "feature":
		return "2222222222222222222222222222222222222222", true
	}
	return "", false
}

type standinCase struct {
	name   string
	start  func(t *testing.T) *Server
	auth   func(r *http.Request, token string)
	create string // path under URL
	body   string // a documented create body from feature into main
	// message reads the forge's error shape.
	message func(body []byte) string
}

var standinCases = []standinCase{
	{
		name: "bitbucket",
		start: func(t *testing.T) *Server {
			return NewBitbucket(t, "acme", "fleet", Config{Username: "me@example.com", Token: testToken, Branch: branches})
		},
		auth:   func(r *http.Request, token string) { r.SetBasicAuth("me@example.com", token) },
		create: "repositories/acme/fleet/pullrequests",
		body:   `{"title": "t", "description": "d", "source": {"branch": {"name": "feature"}}, "destination": {"branch": {"name": "main"}}}`,
		message: func(b []byte) string {
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(b, &e) != nil || e.Type != "error" {
				return ""
			}
			return e.Error.Message
		},
	},
	{
		name: "bitbucketserver",
		start: func(t *testing.T) *Server {
			return NewBitbucketServer(t, "OPS", "fleet", Config{Token: testToken, Branch: branches})
		},
		auth:   func(r *http.Request, token string) { r.Header.Set("Authorization", "Bearer "+token) },
		create: "projects/OPS/repos/fleet/pull-requests",
		body: `{"title": "t", "description": "d",
			"fromRef": {"id": "refs/heads/feature", "repository": {"slug": "fleet", "project": {"key": "OPS"}}},
			"toRef": {"id": "refs/heads/main", "repository": {"slug": "fleet", "project": {"key": "OPS"}}}}`,
		message: func(b []byte) string {
			var e struct {
				Errors []struct {
					Message string `json:"message"`
				} `json:"errors"`
			}
			if json.Unmarshal(b, &e) != nil || len(e.Errors) == 0 {
				return ""
			}
			return e.Errors[0].Message
		},
	},
	{
		name: "azuredevops",
		start: func(t *testing.T) *Server {
			return NewAzureDevOps(t, "acme", "platform", "fleet", "self-id", Config{Token: testToken, Branch: branches})
		},
		auth:   func(r *http.Request, token string) { r.SetBasicAuth("", token) },
		create: "acme/platform/_apis/git/repositories/fleet/pullrequests?api-version=7.1",
		body:   `{"sourceRefName": "refs/heads/feature", "targetRefName": "refs/heads/main", "title": "t", "description": "d"}`,
		message: func(b []byte) string {
			var e struct {
				Message string `json:"message"`
				TypeKey string `json:"typeKey"`
			}
			if json.Unmarshal(b, &e) != nil || e.TypeKey == "" {
				return ""
			}
			return e.Message
		},
	},
}

func TestStandInsRefuseWhatTheForgeWould(t *testing.T) {
	for _, tc := range standinCases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			post := func(path, token, body string) (int, []byte) {
				t.Helper()
				req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				tc.auth(req, token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				data, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, data
			}
			refused := func(what string, status int, data []byte, want int) {
				t.Helper()
				if status != want || tc.message(data) == "" {
					t.Errorf("%s: %d %s, want %d in the forge's error shape", what, status, data, want)
				}
			}

			status, data := post(tc.create, "wrong-token", tc.body)
			refused("a wrong token", status, data, http.StatusUnauthorized)
			status, data = post(strings.Replace(tc.create, "fleet", "other", 1), testToken, tc.body)
			refused("another repository", status, data, http.StatusNotFound)
			status, data = post(tc.create, testToken, strings.Replace(tc.body, `"description"`, `"descripton"`, 1))
			refused("a misspelt field", status, data, http.StatusBadRequest)
			if n := len(s.Refusals()); n != 3 || len(s.Pulls()) != 0 {
				t.Fatalf("%d refusals recorded, %d requests opened; want 3 and none: %q", n, len(s.Pulls()), s.Refusals())
			}

			if status, data = post(tc.create, testToken, tc.body); status != http.StatusCreated {
				t.Fatalf("the documented create: %d %s", status, data)
			}
			if p := s.Pulls(); len(p) != 1 || !p[0].Open() || p[0].Head != "feature" || p[0].Base != "main" || p[0].Title != "t" || p[0].Body != "d" {
				t.Errorf("requests %+v", p)
			}
			status, data = post(tc.create, testToken, tc.body)
			if status < 400 || tc.message(data) == "" || len(s.Pulls()) != 1 {
				t.Errorf("a second open request of the pair: %d %s, %d requests", status, data, len(s.Pulls()))
			}
		})
	}
}

// The lists page and filter as documented: one request a page, the next
// page linked or numbered until the last, and a branch's requests alone
// when the query names it.
func TestStandInsPageAndFilter(t *testing.T) {
	type page struct {
		heads []string
		more  bool
	}
	for _, tc := range []struct {
		name string
		// list is the path of page (from 0) of size 1, of head's
		// requests when head is set.
		list func(s *Server, page int, head string) string
		read func(t *testing.T, body []byte) page
	}{
		{
			name: "bitbucket",
			list: func(s *Server, p int, head string) string {
				q := "pagelen=1&page=" + strconv.Itoa(p+1)
				if head != "" {
					q += "&q=" + url.QueryEscape(`source.branch.name = "`+head+`" AND destination.branch.name = "main"`)
				}
				return "repositories/acme/fleet/pullrequests?" + q
			},
			read: func(t *testing.T, b []byte) page {
				var l struct {
					Values []struct {
						Source struct {
							Branch struct{ Name string } `json:"branch"`
						} `json:"source"`
					} `json:"values"`
					Next string `json:"next"`
				}
				if err := json.Unmarshal(b, &l); err != nil {
					t.Fatal(err)
				}
				var p page
				for _, v := range l.Values {
					p.heads = append(p.heads, v.Source.Branch.Name)
				}
				p.more = l.Next != ""
				return p
			},
		},
		{
			name: "bitbucketserver",
			list: func(s *Server, p int, head string) string {
				q := "limit=1&start=" + strconv.Itoa(p)
				if head != "" {
					q += "&direction=OUTGOING&at=refs/heads/" + head
				}
				return "projects/OPS/repos/fleet/pull-requests?" + q
			},
			read: func(t *testing.T, b []byte) page {
				var l struct {
					Values []struct {
						FromRef struct {
							DisplayID string `json:"displayId"`
						} `json:"fromRef"`
					} `json:"values"`
					IsLastPage bool `json:"isLastPage"`
				}
				if err := json.Unmarshal(b, &l); err != nil {
					t.Fatal(err)
				}
				var p page
				for _, v := range l.Values {
					p.heads = append(p.heads, v.FromRef.DisplayID)
				}
				p.more = !l.IsLastPage
				return p
			},
		},
		{
			name: "azuredevops",
			list: func(s *Server, p int, head string) string {
				q := "api-version=7.1&$top=1&$skip=" + strconv.Itoa(p)
				if head != "" {
					q += "&searchCriteria.sourceRefName=refs/heads/" + head
				}
				return "acme/platform/_apis/git/repositories/fleet/pullrequests?" + q
			},
			read: func(t *testing.T, b []byte) page {
				var l struct {
					Value []struct {
						SourceRefName string `json:"sourceRefName"`
					} `json:"value"`
				}
				if err := json.Unmarshal(b, &l); err != nil {
					t.Fatal(err)
				}
				var p page
				for _, v := range l.Value {
					p.heads = append(p.heads, strings.TrimPrefix(v.SourceRefName, "refs/heads/"))
				}
				// Azure DevOps says nothing of more: a full page may have
				// a next one.
				p.more = len(p.heads) == 1
				return p
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sc standinCase
			for _, c := range standinCases {
				if c.name == tc.name {
					sc = c
				}
			}
			s := sc.start(t)
			state := "OPEN"
			if tc.name == "azuredevops" {
				state = "active"
			}
			for _, h := range []string{"a", "b", "c"} {
				s.Seed(Pull{Title: h, Head: h, Base: "main", State: state})
			}
			get := func(path string) []byte {
				t.Helper()
				req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				sc.auth(req, testToken)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				data, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %d %s", path, resp.StatusCode, data)
				}
				return data
			}
			var all []string
			for p := 0; p < 3; p++ {
				pg := tc.read(t, get(tc.list(s, p, "")))
				if len(pg.heads) != 1 || pg.more != (p < 2 || tc.name == "azuredevops") {
					t.Errorf("page %d: %+v", p, pg)
				}
				all = append(all, pg.heads...)
			}
			if strings.Join(all, ",") != "c,b,a" {
				t.Errorf("pages list %q, want the three requests newest first", all)
			}
			if pg := tc.read(t, get(tc.list(s, 0, "b"))); len(pg.heads) != 1 || pg.heads[0] != "b" || (pg.more && tc.name != "azuredevops") {
				t.Errorf("b's requests: %+v", pg)
			}
			if r := s.Refusals(); len(r) != 0 {
				t.Errorf("refused %q", r)
			}
		})
	}
}
