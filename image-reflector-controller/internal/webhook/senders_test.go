package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/receiver"
)

// The payloads below are built from each sender's public documentation
// (the links are on the parse functions), trimmed to the fields that
// matter plus some that do not; distribution's is the shape Debian's
// docker-registry 2.8 sends, which tests/webhook also receives for real.

const distributionPush = `{"events":[
 {"id":"1","timestamp":"2026-01-01T00:00:00Z","action":"push",
  "target":{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":10,"digest":"sha256:aa","repository":"team/app","url":"http://127.0.0.1:5000/v2/team/app/blobs/sha256:aa"},
  "request":{"id":"r1","addr":"127.0.0.1:4000","host":"127.0.0.1:5000","method":"PUT","useragent":"go-containerregistry"}},
 {"id":"2","timestamp":"2026-01-01T00:00:00Z","action":"push",
  "target":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","size":10,"digest":"sha256:bb","repository":"team/app","url":"http://127.0.0.1:5000/v2/team/app/manifests/sha256:bb","tag":"1.2.3"},
  "request":{"id":"r2","addr":"127.0.0.1:4000","host":"127.0.0.1:5000","method":"PUT","useragent":"go-containerregistry"}},
 {"id":"3","action":"pull","target":{"repository":"team/other","tag":"1.0.0"},"request":{"host":"127.0.0.1:5000"}}]}`

const dockerHubPush = `{"callback_url":"https://registry.hub.docker.com/u/svendowideit/testhook/hook/2141b5bi5i5b02bec211i4eeih0242eg11000a/",
 "push_data":{"pushed_at":1417566161,"pusher":"trustedbuilder","tag":"latest"},
 "repository":{"name":"testhook","namespace":"svendowideit","owner":"svendowideit","repo_name":"svendowideit/testhook","repo_url":"https://registry.hub.docker.com/u/svendowideit/testhook/","status":"Active"}}`

const githubPackage = `{"action":"published","package":{"id":1,"name":"App","namespace":"octo-org","package_type":"CONTAINER",
 "owner":{"login":"Octo-Org","type":"Organization"},
 "package_version":{"id":2,"version":"sha256:cc","container_metadata":{"tag":{"name":"v2.0.0","digest":"sha256:cc"}}}},
 "repository":{"full_name":"octo-org/app"},"sender":{"login":"octocat"}}`

const gitlabTagPush = `{"object_kind":"tag_push","ref":"refs/tags/v1.0.0","checkout_sha":"82b3d5ae55f7080f1e6022629cdb57bfae7cccc7",
 "project":{"id":1,"name":"Example","path_with_namespace":"Group/Example","web_url":"http://example.com/group/example"}}`

const harborPush = `{"type":"PUSH_ARTIFACT","occur_at":1680501893,"operator":"harbor-jobservice",
 "event_data":{"resources":[{"digest":"sha256:dd","tag":"v1.1","resource_url":"harbor.example.com/library/app:v1.1"}],
 "repository":{"date_created":1680501893,"name":"app","namespace":"library","repo_full_name":"library/app","repo_type":"private"}}}`

const acrPush = `{"id":"cb8c3971-9adc-488b-xxxx-43cbb4974ff5","timestamp":"2017-11-17T16:52:01.343145347Z","action":"push",
 "target":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","size":524,"digest":"sha256:80f0d5c8786bb9e621a45ece0db56d11cdc624ad20da9fe62e9d25490f331d7d","length":524,"repository":"hello-world","tag":"v1"},
 "request":{"id":"3cbb6949-7549-4fa1-xxxx-a6d5451dffc7","host":"myregistry.azurecr.io","method":"PUT","useragent":"docker/17.09.0-ce"}}`

const nexusComponent = `{"timestamp":"2016-11-10T23:57:49.664+0000","nodeId":"52905B51-085CCABB-CEBBEAAD-16795588-FC927D93",
 "initiator":"admin/127.0.0.1","repositoryName":"docker-hosted","action":"CREATED",
 "component":{"id":"08909bf0c86cf6c9600aade89e1c5e25","componentId":"Y2xhc3NpZmllcl9zZXJ2aWNl","format":"docker","name":"team/app","group":null,"version":"2.1.0"}}`

const quayPush = `{"repository":"mynamespace/repository","namespace":"mynamespace","name":"repository",
 "docker_url":"quay.io/mynamespace/repository","homepage":"https://quay.io/repository/mynamespace/repository",
 "updated_tags":["latest","1.0"]}`

// Each sender's documented push payload yields the repositories it is
// about, canonical, with the tag; events about something else yield none.
func TestParse(t *testing.T) {
	tests := []struct {
		typ, event, body string
		want             []Target
		ignored          bool
	}{
		{imagev1.WebhookDistribution, "", distributionPush, []Target{{Name: "127.0.0.1:5000/team/app", Tag: "1.2.3"}}, false},
		{imagev1.WebhookDistribution, "", `{"events":[{"action":"pull","target":{"repository":"x","tag":"y"}}]}`, nil, false},
		{imagev1.WebhookDistribution, "", `{"events":[{"action":"push","target":{"repository":"x","tag":"y","url":"https://r.example.com/v2/x/manifests/y"}}]}`,
			[]Target{{Name: "r.example.com/x", Tag: "y"}}, false},
		{imagev1.WebhookDockerHub, "", dockerHubPush, []Target{{Name: "docker.io/svendowideit/testhook", Tag: "latest"}}, false},
		{imagev1.WebhookDockerHub, "", `{"push_data":{"tag":"1.27"},"repository":{"repo_name":"nginx"}}`, []Target{{Name: "docker.io/library/nginx", Tag: "1.27"}}, false},
		{imagev1.WebhookGitHub, "package", githubPackage, []Target{{Name: "ghcr.io/octo-org/app", Tag: "v2.0.0"}}, false},
		{imagev1.WebhookGitHub, "ping", `{"zen":"Keep it logically awesome.","hook_id":1}`, nil, true},
		{imagev1.WebhookGitHub, "package", `{"action":"published","package":{"name":"lib","package_type":"npm","owner":{"login":"o"}}}`, nil, true},
		{imagev1.WebhookGitLab, "Tag Push Hook", gitlabTagPush, []Target{{Path: "group/example", Prefix: true, Tag: "v1.0.0"}}, false},
		{imagev1.WebhookHarbor, "", harborPush, []Target{{Name: "harbor.example.com/library/app", Tag: "v1.1"}}, false},
		{imagev1.WebhookHarbor, "", `{"type":"DELETE_ARTIFACT","event_data":{}}`, nil, true},
		{imagev1.WebhookQuay, "", quayPush, []Target{{Name: "quay.io/mynamespace/repository", Tag: "latest"}}, false},
		{imagev1.WebhookACR, "", acrPush, []Target{{Name: "myregistry.azurecr.io/hello-world", Tag: "v1"}}, false},
		{imagev1.WebhookACR, "", `{"action":"delete","target":{"repository":"hello-world"}}`, nil, true},
		{imagev1.WebhookNexus, "rm:repository:component", nexusComponent, []Target{{Path: "team/app", Tag: "2.1.0"}}, false},
		{imagev1.WebhookNexus, "rm:repository:asset", nexusComponent, nil, true},
		{imagev1.WebhookNexus, "rm:repository:component", strings.Replace(nexusComponent, `"docker"`, `"maven2"`, 1), nil, true},
		{imagev1.WebhookGeneric, "", `{"repositories":["docker.io/library/nginx:1.27","ghcr.io/org/app"]}`,
			[]Target{{Name: "docker.io/library/nginx", Tag: "1.27"}, {Name: "ghcr.io/org/app"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.typ+"/"+tt.event, func(t *testing.T) {
			h := http.Header{}
			h.Set("X-GitHub-Event", tt.event)
			h.Set("X-Nexus-Webhook-Id", tt.event)
			got, err := parse(tt.typ, h, []byte(tt.body))
			if tt.ignored {
				if err != errIgnore {
					t.Fatalf("want ignored, got %v, %v", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("target %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// Malformed bodies are errors, never panics, for every sender type.
func TestParseMalformed(t *testing.T) {
	bodies := []string{"", "null", "[]", "{", "\x00\xff", `"string"`, `{"events":"x"}`, `{"events":[null]}`,
		`{"events":[{"action":"push","target":{"repository":"UPPER/../x","tag":"t"},"request":{"host":"bad host"}}]}`,
		`{"repository":{"repo_name":"a b"}}`, `{"package":null}`, `{"action":"published","registry_package":{}}`,
		`{"project":{}}`, `{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"resource_url":"::"}]}}`,
		`{"docker_url":"http://"}`, `{"repositories":[""]}`, `{"repositories":[1]}`, `{"action":"push","target":{"tag":"x"}}`,
		`{"action":"CREATED","component":{"format":"docker","name":"../A B"}}`, strings.Repeat("[", 10000)}
	types := append(senders(nil).Types(), "unknown")
	for _, typ := range types {
		for _, b := range bodies {
			h := http.Header{}
			h.Set("X-GitHub-Event", "package")
			targets, err := parse(typ, h, []byte(b))
			for _, tg := range targets {
				if tg.Name == "" && tg.Path == "" {
					t.Errorf("%s %q: empty target without an error", typ, b)
				}
			}
			_ = err
			_ = verify(typ, h, []byte(b), []byte("k"))
		}
	}
}

// Each type accepts the credential its sender sends and refuses a missing
// one with 401 and a wrong one with 403; GitHub's signature is checked
// against the example in GitHub's documentation.
func TestVerify(t *testing.T) {
	token := []byte("It's a Secret to Everybody")
	body := []byte("Hello, World!")
	// From https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
	const githubExample = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if receiver.Sign(token, body) != githubExample {
		t.Fatalf("Sign = %s, GitHub documents %s", receiver.Sign(token, body), githubExample)
	}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		typ    string
		h      http.Header
		status int // 0: accepted
	}{
		{imagev1.WebhookDistribution, hdr("Authorization", "Bearer "+string(token)), 0},
		{imagev1.WebhookDistribution, hdr(), http.StatusUnauthorized},
		{imagev1.WebhookDistribution, hdr("Authorization", string(token)), http.StatusForbidden},
		{imagev1.WebhookGeneric, hdr("Authorization", "Bearer nope"), http.StatusForbidden},
		{imagev1.WebhookHarbor, hdr("Authorization", string(token)), 0},
		{imagev1.WebhookHarbor, hdr("Authorization", "Bearer "+string(token)), 0},
		{imagev1.WebhookHarbor, hdr("Authorization", "Basic x"), http.StatusForbidden},
		{imagev1.WebhookGitLab, hdr("X-Gitlab-Token", string(token)), 0},
		{imagev1.WebhookGitLab, hdr("X-Gitlab-Token", string(token)+"x"), http.StatusForbidden},
		{imagev1.WebhookGitLab, hdr("Authorization", "Bearer "+string(token)), http.StatusUnauthorized},
		{imagev1.WebhookGitHub, hdr("X-Hub-Signature-256", githubExample), 0},
		{imagev1.WebhookGitHub, hdr("X-Hub-Signature-256", strings.Replace(githubExample, "7", "8", 1)), http.StatusForbidden},
		{imagev1.WebhookGitHub, hdr("X-Hub-Signature-256", "sha1=abc"), http.StatusForbidden},
		{imagev1.WebhookGitHub, hdr("X-Hub-Signature-256", "sha256=zz"), http.StatusForbidden},
		{imagev1.WebhookGitHub, hdr("X-Hub-Signature", "sha1=abc"), http.StatusUnauthorized},
		{imagev1.WebhookGenericHMAC, hdr("X-Signature", githubExample), 0},
		{imagev1.WebhookGenericHMAC, hdr(), http.StatusUnauthorized},
		{imagev1.WebhookDockerHub, hdr(), 0},
		{imagev1.WebhookQuay, hdr(), 0},
		{imagev1.WebhookACR, hdr("Authorization", "Bearer "+string(token)), 0},
		{imagev1.WebhookACR, hdr(), http.StatusUnauthorized},
		// Nexus: bare hex HMAC-SHA1 of the body (Sonatype's webhook docs).
		{imagev1.WebhookNexus, hdr("X-Nexus-Webhook-Signature", nexusSig(token, body)), 0},
		{imagev1.WebhookNexus, hdr("X-Nexus-Webhook-Signature", receiver.Sign(token, body)), http.StatusForbidden},
		{imagev1.WebhookNexus, hdr(), http.StatusUnauthorized},
		{"unknown", hdr(), http.StatusBadRequest},
	}
	for _, tt := range tests {
		err := verify(tt.typ, tt.h, body, token)
		switch {
		case tt.status == 0 && err != nil:
			t.Errorf("%s %v: refused: %v", tt.typ, tt.h, err)
		case tt.status != 0:
			ae, ok := err.(*receiver.Refusal)
			if !ok || ae.Status != tt.status {
				t.Errorf("%s %v: got %v, want status %d", tt.typ, tt.h, err, tt.status)
			}
			if ok && strings.Contains(ae.Msg, string(token)) {
				t.Errorf("the refusal quotes the token")
			}
		}
	}
}

func nexusSig(key, body []byte) string {
	mac := hmac.New(sha1.New, key)
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// tableKeys verify gcr's tokens in verify's table: no test reaches Google,
// a key lookup is refused at once.
var tableKeys = newGoogleKeys("http://127.0.0.1:1/certs")

// verify and parse run a call of type typ through the sender table, as the
// receiver does.
func verify(typ string, h http.Header, body, token []byte) error {
	c := &receiver.Call{Hook: receiver.Hook{Type: typ}, Header: h, Body: body}
	return senders(tableKeys).Verify(context.Background(), c, map[string][]byte{receiver.TokenKey: token})
}

func parse(typ string, h http.Header, body []byte) ([]Target, error) {
	return senders(tableKeys).Parse(&receiver.Call{Hook: receiver.Hook{Type: typ}, Header: h, Body: body})
}

// The sender table has exactly the types ImageWebhookSpec.Type's enum
// marker lets the API server accept: a sender added without its enum
// value (or the reverse) fails here, not as a 400 on the first call.
func TestSendersMatchTheAPIEnum(t *testing.T) {
	src, err := os.ReadFile("../../../pkg/apis/image/v1beta1/imagewebhook_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)type ImageWebhookSpec struct.*?\+kubebuilder:validation:Enum=(\S+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("ImageWebhookSpec has no enum marker")
	}
	want := strings.Split(string(m[1]), ";")
	slices.Sort(want)
	if got := senders(nil).Types(); !slices.Equal(got, want) {
		t.Errorf("sender table %v, API enum %v", got, want)
	}
}

// Every sender needs the token (it makes the path); gcr also needs the
// push subscription's email and audience.
func TestSecretKeys(t *testing.T) {
	for _, typ := range senders(nil).Types() {
		keys := SecretKeys(typ)
		if !slices.Contains(keys, receiver.TokenKey) {
			t.Errorf("%s: %v lacks %q", typ, keys, receiver.TokenKey)
		}
		if extra := len(keys) > 1; extra != (typ == imagev1.WebhookGCR) {
			t.Errorf("%s: keys %v", typ, keys)
		}
	}
	if got := SecretKeys(imagev1.WebhookGCR); !slices.Equal(got, []string{receiver.TokenKey, EmailKey, AudienceKey}) {
		t.Errorf("gcr: %v", got)
	}
}
