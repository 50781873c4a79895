package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// Discovery through the three controllers, on a repository of several
// apps without a single marker: the automation finds the images, makes an
// ImageRepository and an ImagePolicy for each (one for an image written
// in two files), follows the namespace's own policy for another, leaves an
// opted-out workload alone; the policies' choices land in one commit that
// updates every location; a tag pushed later moves both files of its
// image in one commit; an image taken out of the repository loses the
// objects made for it.
func TestChainDiscover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, root := startChain(ctx, t, nil, chain.Options{})
	reg := env.RegistryHost
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	push := func(repo string, tags ...string) {
		t.Helper()
		for _, tag := range tags {
			ref, err := name.NewTag(reg+"/acme/"+repo+":"+tag, name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
				t.Fatal(err)
			}
		}
	}
	push("web", "1.0.0", "1.1.0", "2.0.0")
	push("proxy", "2.0.0")
	push("api", "1.0.0", "1.0.1", "1.1.0")

	deploy := func(app string, containers ...string) string {
		s := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: " + app + ", namespace: default}\nspec:\n  template:\n    spec:\n      containers:\n"
		for _, c := range containers {
			n, ref, _ := strings.Cut(c, "=")
			s += "      - name: " + n + "\n        image: " + reg + "/acme/" + ref + "\n"
		}
		return s
	}
	web := func(tag string, proxy bool) string {
		cs := []string{"web=web:" + tag}
		if proxy {
			cs = append(cs, "proxy=proxy:2.0.0")
		}
		return deploy("web", cs...)
	}
	legacy := strings.Replace(deploy("legacy", "web=web:1.0.0"), "metadata: {name: legacy, namespace: default}",
		"metadata:\n  name: legacy\n  annotations: {image.toolkit.dev/automated: \"false\"}", 1)
	kust := func(tag string) string {
		return "resources: [deploy.yaml]\nimages:\n- name: web\n  newName: " + reg + "/acme/web\n  newTag: " + tag + "\n"
	}
	if _, err := env.Commit(map[string]string{
		"apps/web/deploy.yaml":        web("1.0.0", true),
		"apps/web/kustomization.yaml": kust("1.0.0"),
		"apps/api/deploy.yaml":        deploy("api", "api=api:1.0.0"),
		"apps/legacy/deploy.yaml":     legacy,
	}, "apps without markers"); err != nil {
		t.Fatal(err)
	}

	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	secret := samples[strings.LastIndex(samples, "---\napiVersion: v1\nkind: Secret"):]
	objects := secret + fmt.Sprintf(`---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: api, namespace: default}
spec: {image: %[1]s/acme/api, interval: 1h, insecure: true}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: api-ours, namespace: default}
spec:
  imageRepositoryRef: {name: api}
  policy: {semver: {range: "~1.0"}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata: {name: onboard, namespace: default}
spec:
  interval: 1h
  git:
    repository: {url: %[2]s, secretRef: {name: git-credentials}}
    checkout: {ref: {branch: main}}
    commit:
      author: {name: imagebot, email: imagebot@example.com}
      messageTemplate: "Discovered images updated"
    push: {branch: main}
  update: {path: ./apps}
  policySelector: {matchLabels: {none: none}}
  discover:
    interval: 1h
    registries: [{host: "%[1]s", insecure: true}]
`, reg, env.RepoURL)
	if err := env.Apply(ctx, objects); err != nil {
		t.Fatal(err)
	}

	// web 1.0.0 → 1.1.0 (same major) in the Deployment and the
	// kustomization, api → 1.0.1 (the namespace's own ~1.0), proxy and the
	// opted-out legacy as they were. The policies resolve one by one, so
	// this may take more than one commit.
	show := func(rev, p string) string { return must(env.FleetGit("show", rev+":"+p)) }
	var first string
	testenv.Eventually(t, 2*time.Minute, func() (bool, error) {
		first = env.Head("main")
		return show(first, "apps/web/deploy.yaml") == web("1.1.0", true) && show(first, "apps/web/kustomization.yaml") == kust("1.1.0") &&
			show(first, "apps/api/deploy.yaml") == deploy("api", "api=api:1.0.1"), nil
	})
	if got := show(first, "apps/legacy/deploy.yaml"); got != legacy {
		t.Errorf("apps/legacy/deploy.yaml changed:\n%s", got)
	}
	c := env.Cluster.Client
	iua := &imagev1.ImageUpdateAutomation{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "onboard"}, iua); err != nil {
		t.Fatal(err)
	}
	policies := map[string]string{}
	for _, d := range iua.Status.Discovered {
		policies[strings.TrimPrefix(d.Name, reg+"/acme/")] = d.Policy
	}
	if policies["web"] != "onboard-web" || policies["proxy"] != "onboard-proxy" || policies["api"] != "api-ours" {
		t.Errorf("status.discovered %+v", iua.Status.Discovered)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "onboard-api"}, &imagev1.ImagePolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("a policy was made for api, which has its own: %v", err)
	}

	// A new tag of web: both files in one commit.
	push("web", "1.2.0")
	webRepo := &imagev1.ImageRepository{}
	webRepo.Name, webRepo.Namespace = "onboard-web", "default"
	if err := env.RequestReconcile(ctx, webRepo); err != nil {
		t.Fatal(err)
	}
	second := waitHead(t, env, "main", first)
	diff := must(env.FleetGit("diff", "--stat", first, second))
	if !strings.Contains(diff, "apps/web/deploy.yaml") || !strings.Contains(diff, "apps/web/kustomization.yaml") || !strings.Contains(diff, "2 files changed") {
		t.Errorf("the 1.2.0 commit:\n%s", diff)
	}

	// The proxy leaves the repository: its objects go.
	if _, err := env.Commit(map[string]string{"apps/web/deploy.yaml": web("1.2.0", false)}, "no proxy"); err != nil {
		t.Fatal(err)
	}
	if err := env.RequestReconcile(ctx, iua); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		err1 := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "onboard-proxy"}, &imagev1.ImagePolicy{})
		err2 := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "onboard-proxy"}, &imagev1.ImageRepository{})
		return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2), nil
	})
	for _, n := range []string{"onboard-web", "api-ours"} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: n}, &imagev1.ImagePolicy{}); err != nil {
			t.Errorf("ImagePolicy %s: %v", n, err)
		}
	}
}
