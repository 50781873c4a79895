package webhook

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/imagename"
	"toolkit.dev/image-toolkit/pkg/receiver"
)

// Target is a repository a call is about. Name is the canonical repository
// (host/path) when the payload says where it lives; otherwise Path is the
// repository path alone, matched on any host, and with Prefix also every
// repository below it (a GitLab project's images).
type Target struct {
	Name   string
	Path   string
	Prefix bool
	Tag    string
}

// senders is the ImageWebhook's table of senders, by spec.type (the API's
// enum, which TestSendersMatchTheAPIEnum holds it to): how each
// authenticates and which repositories its payload names. google verifies
// gcr's ID tokens; the table read for its keys alone may have none.
func senders(google *googleKeys) receiver.Senders[[]Target] {
	return receiver.Senders[[]Target]{
		// distribution sends the headers configured on the endpoint; we
		// ask for a bearer token, as an operator would write it there.
		imagev1.WebhookDistribution: {Verify: receiver.Bearer, Parse: payload(parseDistribution)},
		imagev1.WebhookDockerHub:    {Verify: receiver.PathOnly, Parse: payload(parseDockerHub)},
		imagev1.WebhookGitHub: {Verify: receiver.SHA256("X-Hub-Signature-256"),
			Parse: func(h http.Header, body []byte) ([]Target, error) { return parseGitHub(h.Get("X-GitHub-Event"), body) }},
		imagev1.WebhookGitLab: {Verify: receiver.Token("X-Gitlab-Token"), Parse: payload(parseGitLab)},
		imagev1.WebhookHarbor: {Verify: verifyHarbor, Parse: payload(parseHarbor)},
		imagev1.WebhookQuay:   {Verify: receiver.PathOnly, Parse: payload(parseQuay)},
		// ACR's custom headers are configured on the webhook; we ask for a
		// bearer token there.
		imagev1.WebhookACR: {Verify: receiver.Bearer, Parse: payload(parseACR)},
		// Nexus Repository signs with the bare hex HMAC-SHA1 of the body.
		imagev1.WebhookNexus: {Verify: receiver.HMAC("X-Nexus-Webhook-Signature", "", sha1.New),
			Parse: func(h http.Header, body []byte) ([]Target, error) {
				return parseNexus(h.Get("X-Nexus-Webhook-Id"), body)
			}},
		imagev1.WebhookGCR: {SecretKeys: []string{receiver.TokenKey, EmailKey, AudienceKey},
			Verify: google.verifyCall, Parse: payload(parseGCR)},
		imagev1.WebhookGeneric:     {Verify: receiver.Bearer, Parse: payload(parseGeneric)},
		imagev1.WebhookGenericHMAC: {Verify: receiver.SHA256("X-Signature"), Parse: payload(parseGeneric)},
	}
}

// payload adapts a parser of the body alone to a Sender's Parse.
func payload(parse func([]byte) ([]Target, error)) func(http.Header, []byte) ([]Target, error) {
	return func(_ http.Header, body []byte) ([]Target, error) { return parse(body) }
}

// verifyHarbor: Harbor sends its "Auth Header" setting verbatim; the token
// alone or as a bearer token is accepted, whichever the operator typed.
func verifyHarbor(_ context.Context, c *receiver.Call, secret map[string][]byte) error {
	got, token := c.Header.Get("Authorization"), string(secret[receiver.TokenKey])
	if got == "" {
		return receiver.Missing("Authorization")
	}
	if !receiver.Equal(got, token) && !receiver.Equal(got, "Bearer "+token) {
		return receiver.Wrong(receiver.ReasonBadAuth, "Authorization")
	}
	return nil
}

// errIgnore marks a valid call that is about nothing to scan (a ping, a
// delete, a blob upload): it is accepted and nothing is queued.
var errIgnore = errors.New("nothing to scan")

// repoTarget canonicalises host/path (docker.io/library/x and x are the
// same repository, imagename.Canonical); a tag or digest on it is dropped.
func repoTarget(ref, tag string) (Target, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return Target{}, errors.New("empty repository")
	}
	r, err := name.ParseReference(strings.ToLower(ref))
	if err != nil {
		return Target{}, fmt.Errorf("repository %q: %w", ref, err)
	}
	if t, ok := r.(name.Tag); ok && tag == "" && t.TagStr() != "" && strings.Contains(ref, ":") &&
		strings.LastIndex(ref, ":") > strings.LastIndex(ref, "/") {
		tag = t.TagStr()
	}
	return Target{Name: imagename.Canonical(r.Context()), Tag: tag}, nil
}

// decode unmarshals a JSON object; anything else is an error.
func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("payload is not the JSON this sender sends: %w", err)
	}
	return nil
}

// CNCF distribution's notification envelope
// (https://distribution.github.io/distribution/about/notifications/):
// events with action "push"; a manifest's event carries target.tag, blob
// events do not. Only tagged manifest pushes are targets: a scan triggered
// by a blob would run before the tag exists.
func parseDistribution(body []byte) ([]Target, error) {
	var env struct {
		Events []struct {
			Action string `json:"action"`
			Target struct {
				Repository string `json:"repository"`
				Tag        string `json:"tag"`
				URL        string `json:"url"`
			} `json:"target"`
			Request struct {
				Host string `json:"host"`
			} `json:"request"`
		} `json:"events"`
	}
	if err := decode(body, &env); err != nil {
		return nil, err
	}
	if env.Events == nil {
		return nil, errors.New("payload has no events")
	}
	var out []Target
	for _, e := range env.Events {
		if e.Action != "push" || e.Target.Tag == "" || e.Target.Repository == "" {
			continue
		}
		host := e.Request.Host
		if host == "" {
			if u, err := url.Parse(e.Target.URL); err == nil {
				host = u.Host
			}
		}
		if host == "" {
			out = append(out, Target{Path: strings.ToLower(e.Target.Repository), Tag: e.Target.Tag})
			continue
		}
		t, err := repoTarget(host+"/"+e.Target.Repository, e.Target.Tag)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Docker Hub's repository webhook
// (https://docs.docker.com/docker-hub/repos/manage/webhooks/):
// repository.repo_name ("user/app", or "app" for an official image) and
// push_data.tag.
func parseDockerHub(body []byte) ([]Target, error) {
	var p struct {
		PushData struct {
			Tag string `json:"tag"`
		} `json:"push_data"`
		Repository struct {
			RepoName string `json:"repo_name"`
		} `json:"repository"`
	}
	if err := decode(body, &p); err != nil {
		return nil, err
	}
	if p.Repository.RepoName == "" {
		return nil, errors.New("payload has no repository.repo_name")
	}
	// Docker Hub's official images (nginx) are library/nginx there.
	t, err := repoTarget(imagename.DockerHub+"/"+p.Repository.RepoName, p.PushData.Tag)
	if err != nil {
		return nil, err
	}
	return []Target{t}, nil
}

// GitHub's package and registry_package events
// (https://docs.github.com/en/webhooks/webhook-events-and-payloads#package):
// action published or updated, package.name, package.owner.login,
// package.package_type container (docker for the old registry) and
// package.package_version.container_metadata.tag.name; the image is
// ghcr.io/<owner>/<name>, lower case. A ping is accepted with nothing to do.
func parseGitHub(event string, body []byte) ([]Target, error) {
	type pkg struct {
		Name        string `json:"name"`
		PackageType string `json:"package_type"`
		Owner       struct {
			Login string `json:"login"`
		} `json:"owner"`
		PackageVersion struct {
			ContainerMetadata struct {
				Tag struct {
					Name string `json:"name"`
				} `json:"tag"`
			} `json:"container_metadata"`
		} `json:"package_version"`
	}
	var p struct {
		Action          string `json:"action"`
		Package         *pkg   `json:"package"`
		RegistryPackage *pkg   `json:"registry_package"`
	}
	if err := decode(body, &p); err != nil {
		return nil, err
	}
	switch event {
	case "ping":
		return nil, errIgnore
	case "package", "registry_package":
	default:
		return nil, errIgnore
	}
	pk := p.Package
	if event == "registry_package" {
		pk = p.RegistryPackage
	}
	if pk == nil || pk.Name == "" || pk.Owner.Login == "" {
		return nil, errors.New("payload has no package name and owner")
	}
	if p.Action != "published" && p.Action != "updated" {
		return nil, errIgnore
	}
	if t := strings.ToLower(pk.PackageType); t != "container" && t != "docker" {
		return nil, errIgnore
	}
	t, err := repoTarget("ghcr.io/"+pk.Owner.Login+"/"+pk.Name, pk.PackageVersion.ContainerMetadata.Tag.Name)
	if err != nil {
		return nil, err
	}
	return []Target{t}, nil
}

// GitLab's push and tag push events
// (https://docs.gitlab.com/user/project/integrations/webhook_events/):
// project.path_with_namespace. GitLab's container registry holds a
// project's images at <registry>/<project path>[/<name>], on a host the
// payload does not give, so the target is that path and everything below.
func parseGitLab(body []byte) ([]Target, error) {
	var p struct {
		ObjectKind string `json:"object_kind"`
		Ref        string `json:"ref"`
		Project    struct {
			PathWithNamespace string `json:"path_with_namespace"`
		} `json:"project"`
	}
	if err := decode(body, &p); err != nil {
		return nil, err
	}
	if p.Project.PathWithNamespace == "" {
		return nil, errors.New("payload has no project.path_with_namespace")
	}
	tag, _ := strings.CutPrefix(p.Ref, "refs/tags/")
	if tag == p.Ref {
		tag = ""
	}
	return []Target{{Path: strings.ToLower(strings.Trim(p.Project.PathWithNamespace, "/")), Prefix: true, Tag: tag}}, nil
}

// Harbor's HTTP webhook
// (https://goharbor.io/docs/main/working-with-projects/project-configuration/configure-webhooks/):
// type PUSH_ARTIFACT, event_data.resources[].resource_url
// (host/project/repo:tag) and tag; event_data.repository.repo_full_name
// when no resource names a host.
func parseHarbor(body []byte) ([]Target, error) {
	var p struct {
		Type      string `json:"type"`
		EventData struct {
			Resources []struct {
				Tag         string `json:"tag"`
				ResourceURL string `json:"resource_url"`
			} `json:"resources"`
			Repository struct {
				RepoFullName string `json:"repo_full_name"`
			} `json:"repository"`
		} `json:"event_data"`
	}
	if err := decode(body, &p); err != nil {
		return nil, err
	}
	if p.Type == "" {
		return nil, errors.New("payload has no type")
	}
	if p.Type != "PUSH_ARTIFACT" && p.Type != "pushImage" {
		return nil, errIgnore
	}
	var out []Target
	for _, r := range p.EventData.Resources {
		if r.ResourceURL == "" {
			continue
		}
		ref := r.ResourceURL
		if i := strings.Index(ref, "://"); i >= 0 {
			ref = ref[i+3:]
		}
		t, err := repoTarget(ref, r.Tag)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) == 0 && p.EventData.Repository.RepoFullName != "" {
		out = append(out, Target{Path: strings.ToLower(p.EventData.Repository.RepoFullName)})
	}
	return out, nil
}

// Quay's repository push notification
// (https://docs.quay.io/guides/notifications.html): docker_url
// (quay.io/ns/repo, or the registry's own host) and updated_tags.
func parseQuay(body []byte) ([]Target, error) {
	var p struct {
		Repository  string   `json:"repository"`
		DockerURL   string   `json:"docker_url"`
		UpdatedTags []string `json:"updated_tags"`
	}
	if err := decode(body, &p); err != nil {
		return nil, err
	}
	ref := p.DockerURL
	if ref == "" && p.Repository != "" {
		ref = "quay.io/" + p.Repository
	}
	if ref == "" {
		return nil, errors.New("payload has no docker_url or repository")
	}
	tag := ""
	if len(p.UpdatedTags) > 0 {
		tag = p.UpdatedTags[0]
	}
	t, err := repoTarget(ref, tag)
	if err != nil {
		return nil, err
	}
	return []Target{t}, nil
}

// Our own payload, for CI jobs and scripts:
// {"repositories": ["ghcr.io/org/app", "nginx:1.27"]}, each an image
// reference (a tag is informative, dropped for the match).
func parseGeneric(body []byte) ([]Target, error) {
	var p struct {
		Repositories []string `json:"repositories"`
	}
	if err := decode(body, &p); err != nil {
		return nil, err
	}
	if len(p.Repositories) == 0 {
		return nil, errors.New(`payload has no "repositories"`)
	}
	out := make([]Target, 0, len(p.Repositories))
	for _, r := range p.Repositories {
		t, err := repoTarget(r, "")
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Azure Container Registry's webhook
// (https://learn.microsoft.com/en-us/azure/container-registry/container-registry-webhook-reference):
// one event per call, the distribution event's shape: action push,
// target.repository and target.tag, request.host (the registry's login
// server). Custom headers are configured on the webhook; we ask for a
// bearer token there.
func parseACR(body []byte) ([]Target, error) {
	var e struct {
		Action string `json:"action"`
		Target struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"target"`
		Request struct {
			Host string `json:"host"`
		} `json:"request"`
	}
	if err := decode(body, &e); err != nil {
		return nil, err
	}
	if e.Action == "" {
		return nil, errors.New("payload has no action")
	}
	if e.Action != "push" || e.Target.Tag == "" {
		return nil, errIgnore
	}
	if e.Target.Repository == "" || e.Request.Host == "" {
		return nil, errors.New("payload has no target.repository and request.host")
	}
	t, err := repoTarget(e.Request.Host+"/"+e.Target.Repository, e.Target.Tag)
	if err != nil {
		return nil, err
	}
	return []Target{t}, nil
}

// Nexus Repository's repository component webhook
// (https://help.sonatype.com/en/webhooks.html), X-Nexus-Webhook-Id
// rm:repository:component: action CREATED or UPDATED, component.format
// docker, component.name (the image path) and component.version (the
// tag). The payload names the repository, not the host its Docker
// connector serves on, so the path is matched on any host.
func parseNexus(id string, body []byte) ([]Target, error) {
	var p struct {
		Action    string `json:"action"`
		Component *struct {
			Format  string `json:"format"`
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"component"`
	}
	if err := decode(body, &p); err != nil {
		return nil, err
	}
	if id != "" && id != "rm:repository:component" {
		return nil, errIgnore
	}
	if p.Component == nil {
		return nil, errors.New("payload has no component")
	}
	if (p.Action != "CREATED" && p.Action != "UPDATED") || p.Component.Format != "docker" {
		return nil, errIgnore
	}
	path := strings.ToLower(strings.Trim(p.Component.Name, "/"))
	if path == "" {
		return nil, errors.New("payload has no component.name")
	}
	if _, err := name.NewRepository("example.com/" + path); err != nil {
		return nil, fmt.Errorf("component.name %q: %w", p.Component.Name, err)
	}
	return []Target{{Path: path, Tag: p.Component.Version}}, nil
}
