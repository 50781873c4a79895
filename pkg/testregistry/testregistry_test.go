package testregistry

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func TestPaginationAuthTLS(t *testing.T) {
	// go-containerregistry takes loopback registries for plain HTTP and then
	// refuses HTTPS pagination links, so pages are tested without TLS.
	r := New(t, Options{Username: "u", Password: "p", PageSize: 10})
	var tags []string
	for i := range 25 {
		tags = append(tags, fmt.Sprintf("t%02d", i))
	}
	r.PushTags(t, "app", tags)
	repo, _ := name.NewRepository(r.Repo("app"))

	before := r.TagListRequests()
	got, err := remote.List(repo, r.RemoteOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 25 || r.TagListRequests()-before != 3 {
		t.Errorf("%d tags in %d pages, want 25 in 3", len(got), r.TagListRequests()-before)
	}

	_, err = remote.List(repo, remote.WithTransport(r.Transport()), remote.WithAuth(&authn.Basic{Username: "u", Password: "wrong"}))
	var terr *transport.Error
	if err == nil || !asTransport(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong password: %v", err)
	}

	tr := New(t, Options{ClientCerts: true})
	tr.Push(t, "app", "v1")
	if got, err := remote.List(mustRepo(t, tr.Repo("app")), tr.RemoteOptions()...); err != nil || len(got) != 1 {
		t.Errorf("TLS with client certificate: %v %v", got, err)
	}
	if _, err := remote.List(mustRepo(t, tr.Repo("app"))); err == nil {
		t.Error("listing without the CA and client certificate succeeded")
	}

	tr.Fail(1, http.StatusTooManyRequests, "1")
	resp, err := tr.Transport().RoundTrip(mustReq(t, "https://"+tr.Host+"/v2/"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("injected failure: %s %q", resp.Status, resp.Header.Get("Retry-After"))
	}
}

func asTransport(err error, target **transport.Error) bool {
	te, ok := err.(*transport.Error)
	if ok {
		*target = te
	}
	return ok
}

func mustReq(t *testing.T, u string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func mustRepo(t *testing.T, s string) name.Repository {
	r, err := name.NewRepository(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
