package webhook

import (
	"net/http"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// FuzzParse feeds arbitrary bodies and headers to every sender's parser
// and verifier: whatever arrives, they return an error or targets with a
// name or a path, and never panic. The seeds are the documented payloads.
func FuzzParse(f *testing.F) {
	for _, s := range []string{distributionPush, dockerHubPush, githubPackage, gitlabTagPush, harborPush, quayPush,
		acrPush, nexusComponent, `{"repositories":["nginx"]}`, `{"message":{"data":"eyJhY3Rpb24iOiJJTlNFUlQiLCJ0YWciOiJ4L3k6eiJ9"}}`} {
		f.Add(s, "package", "sha256=00")
	}
	types := senders(nil).Types()
	f.Fuzz(func(t *testing.T, body, event, sig string) {
		h := http.Header{}
		h.Set("X-GitHub-Event", event)
		h.Set("X-Nexus-Webhook-Id", event)
		for _, k := range []string{"Authorization", "X-Hub-Signature-256", "X-Signature", "X-Gitlab-Token", "X-Nexus-Webhook-Signature"} {
			h.Set(k, sig)
		}
		for _, typ := range types {
			targets, err := parse(typ, h, []byte(body))
			if err == nil {
				for _, tg := range targets {
					if tg.Name == "" && tg.Path == "" {
						t.Fatalf("%s: empty target from %q", typ, body)
					}
				}
			}
			if typ != imagev1.WebhookGCR {
				_ = verify(typ, h, []byte(body), []byte("key"))
			}
		}
	})
}
