package webhook

import (
	"net/http"
	"testing"

	"toolkit.dev/image-toolkit/pkg/gitsource"
)

// FuzzParse feeds arbitrary bodies and headers to every sender's parser
// and verifier: whatever arrives, they return an error or a push with at
// least one URL that has a repository key, and never panic. The seeds are
// the documented payloads.
func FuzzParse(f *testing.F) {
	for _, s := range []string{githubPush, gitlabPush, giteaPush, `{"repository":"git@host:org/app.git","branch":"main"}`} {
		f.Add(s, "push", "sha256=00")
	}
	types := senders.Types()
	f.Fuzz(func(t *testing.T, body, event, sig string) {
		h := http.Header{}
		for _, k := range []string{"X-GitHub-Event", "X-Gitea-Event", "X-Forgejo-Event"} {
			h.Set(k, event)
		}
		for _, k := range []string{"Authorization", "X-Hub-Signature-256", "X-Signature", "X-Gitlab-Token", "X-Gitea-Signature"} {
			h.Set(k, sig)
		}
		for _, typ := range types {
			p, err := parse(typ, h, []byte(body))
			if err == nil {
				if len(p.URLs) == 0 {
					t.Fatalf("%s: a push without URLs from %q", typ, body)
				}
			}
			_ = verify(typ, h, []byte(body), []byte("key"))
		}
		_, _ = gitsource.RepositoryKey(body)
	})
}
