package forges

// The forges that cannot run here (GitHub, GitLab) are tested against a
// replay of recorded exchanges: one server that checks each request
// against the next expected one and answers it as the forge would.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"toolkit.dev/image-toolkit/pkg/forge"
)

// replayCall is one expected request and the forge's answer to it.
type replayCall struct {
	method string
	path   string     // escaped
	query  url.Values // see replayer.exact
	body   string     // JSON; see replayer.exact
	absent []string   // body fields the request must not send
	// graphQL, when set, is the expected variables of GitHub's mutation
	// (the query text is checked to be enablePullRequestAutoMerge).
	graphQL map[string]any
	status  int // 200 when zero
	header  map[string]string
	reply   string
}

// replayer is how one forge's requests are checked.
type replayer struct {
	// authHeader is the header every request must carry, with auth.
	authHeader, auth string
	// exact: a call's query and body are the request's exactly, none when
	// the call has none. Otherwise the request must carry the call's query
	// parameters and body fields, others allowed, and a call without
	// either leaves the body unchecked.
	exact bool
}

// serve answers the expected calls in order and fails the test on any
// other request, or when an expected call was not made.
func (rp replayer) serve(t *testing.T, calls ...replayCall) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	next := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(calls) {
			t.Errorf("unexpected request %s %s", r.Method, r.URL.RequestURI())
			http.Error(w, `{"message":"unexpected"}`, http.StatusInternalServerError)
			return
		}
		c := calls[next]
		next++
		rp.check(t, next, c, r)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		for k, v := range c.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(max(c.status, http.StatusOK))
		io.WriteString(w, c.reply)
	}))
	t.Cleanup(func() {
		srv.Close()
		mu.Lock()
		defer mu.Unlock()
		if next != len(calls) {
			t.Errorf("%d requests made, want %d", next, len(calls))
		}
	})
	return srv
}

func (rp replayer) check(t *testing.T, n int, c replayCall, r *http.Request) {
	t.Helper()
	if got, want := r.Method+" "+r.URL.EscapedPath(), c.method+" "+c.path; got != want {
		t.Errorf("request %d: %s, want %s", n, got, want)
	}
	if got := r.Header.Get(rp.authHeader); got != rp.auth {
		t.Errorf("request %d: %s %q", n, rp.authHeader, got)
	}
	q := r.URL.Query()
	for k, v := range c.query {
		if !reflect.DeepEqual(q[k], v) {
			t.Errorf("request %d: query %s = %q, want %q", n, k, q[k], v)
		}
	}
	if rp.exact && len(q) != len(c.query) {
		t.Errorf("request %d: query %v, want %v", n, q, c.query)
	}
	sent, _ := io.ReadAll(r.Body)
	switch {
	case c.graphQL != nil:
		checkGraphQL(t, n, sent, c.graphQL)
		return
	case c.body == "" && len(c.absent) == 0:
		if rp.exact && len(sent) > 0 {
			t.Errorf("request %d: unexpected body %s", n, sent)
		}
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("request %d: Content-Type %q", n, ct)
	}
	if rp.exact {
		var x, y any
		if json.Unmarshal(sent, &x) != nil || json.Unmarshal([]byte(c.body), &y) != nil || !reflect.DeepEqual(x, y) {
			t.Errorf("request %d: body %s, want %s", n, sent, c.body)
		}
		return
	}
	var got, want map[string]any
	if err := json.Unmarshal(sent, &got); err != nil {
		t.Errorf("request %d: body: %v", n, err)
	}
	if c.body != "" {
		if err := json.Unmarshal([]byte(c.body), &want); err != nil {
			t.Errorf("bad expected body %s: %v", c.body, err)
		}
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("request %d: body %s = %#v, want %#v", n, k, got[k], v)
		}
	}
	for _, k := range c.absent {
		if v, ok := got[k]; ok {
			t.Errorf("request %d: body has %s = %#v, want none", n, k, v)
		}
	}
}

func checkGraphQL(t *testing.T, n int, sent []byte, vars map[string]any) {
	t.Helper()
	var req struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := json.Unmarshal(sent, &req); err != nil {
		t.Errorf("request %d: GraphQL body %s: %v", n, sent, err)
		return
	}
	if !strings.Contains(req.Query, "mutation") || !strings.Contains(req.Query, "enablePullRequestAutoMerge(input: {pullRequestId: $pullRequestId, mergeMethod: $mergeMethod})") {
		t.Errorf("request %d: GraphQL query %q", n, req.Query)
	}
	if !reflect.DeepEqual(req.Variables, vars) {
		t.Errorf("request %d: GraphQL variables %v, want %v", n, req.Variables, vars)
	}
}

// playStream plays one update stream's life on c, against the calls its
// replay server expects: no open request from image-update/app into main;
// req opened as want; found again as want; its title edited to
// "Update app to 1.2.5"; closed with the comment "main has the change".
func playStream(t *testing.T, c forge.Client, req forge.NewRequest, want *forge.Request) {
	t.Helper()
	ctx := context.Background()
	if got, err := c.FindOpen(ctx, "image-update/app", "main"); err != nil || got != nil {
		t.Fatalf("FindOpen = %+v, %v; want none", got, err)
	}
	created, err := c.Create(ctx, req)
	if err != nil || !reflect.DeepEqual(created, want) {
		t.Fatalf("Create = %+v, %v\nwant %+v", created, err, want)
	}
	found, err := c.FindOpen(ctx, "image-update/app", "main")
	if err != nil || !reflect.DeepEqual(found, want) {
		t.Fatalf("FindOpen = %+v, %v\nwant %+v", found, err, want)
	}
	edited, err := c.Edit(ctx, found, "Update app to 1.2.5", want.Body)
	if err != nil || edited.Title != "Update app to 1.2.5" {
		t.Fatalf("Edit = %+v, %v", edited, err)
	}
	if err := c.Close(ctx, edited, "main has the change"); err != nil {
		t.Fatal(err)
	}
}
