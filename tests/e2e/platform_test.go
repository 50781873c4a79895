package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// Platform digests through the three controllers: for a multi-arch index,
// a policy with digestReflectionPolicy IfNotPresent and platform
// linux/arm64 commits the linux/arm64 manifest's digest, not the index's,
// both where a marker writes the whole reference (name:tag@digest) and
// where one writes only the digest; changing the platform to linux/amd64
// commits that platform's digest for the same tag.
func TestChainPlatformDigest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// testregistry rather than the chain's own registry: PushIndex builds
	// the index (two platforms and a buildx-style attestation) and hands
	// back every digest to compare with.
	reg := testregistry.New(t, testregistry.Options{})
	index, platforms := reg.PushIndex(t, chain.Image, "6.4.0", time.Now().Add(-time.Hour), "linux/amd64", "linux/arm64")
	arm64, amd64 := platforms["linux/arm64"], platforms["linux/amd64"]
	if index == arm64 || index == amd64 || arm64 == amd64 {
		t.Fatalf("digests not distinct: index %s, arm64 %s, amd64 %s", index, arm64, amd64)
	}
	env, root := startChain(ctx, t, nil, chain.Options{RegistryHost: reg.Host})
	host := env.RegistryHost + "/" + chain.Image

	// A kustomization pinning only the digest, next to the chain's
	// Deployment whose marker writes the whole reference.
	const placeholder = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	const digestLine = "  digest: %s # {\"$imagepolicy\": \"default:podinfo:digest\"}"
	start, err := env.Commit(map[string]string{"clusters/prod/kustomization.yaml": fmt.Sprintf(
		"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- podinfo.yaml\nimages:\n- name: %s\n"+digestLine+"\n",
		host, placeholder)}, "fleet: pin the podinfo digest")
	if err != nil {
		t.Fatal(err)
	}

	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	// Set in the applied sample rather than patched afterwards, so that no
	// commit ever carries the index digest.
	samples = extendSamplePolicy(t, samples, `  digestReflectionPolicy: IfNotPresent
  platform: linux/arm64
`)
	if err := env.Apply(ctx, samples); err != nil {
		t.Fatal(err)
	}

	first := waitHead(t, env, "main", start)
	checkCommit(t, env, first, start, "imagebot <imagebot@example.com>",
		fmt.Sprintf("Update images in default/fleet\n\n- %[1]s -> %[2]s\n- %[3]s:6.3.0 -> %[3]s:6.4.0@%[2]s\n", placeholder, arm64, host),
		"-"+fmt.Sprintf(digestLine, placeholder)+"\n"+
			"+"+fmt.Sprintf(digestLine, arm64)+"\n"+
			"-        image: "+host+":6.3.0 # {\"$imagepolicy\": \"default:podinfo\"}\n"+
			"+        image: "+host+":6.4.0@"+arm64+" # {\"$imagepolicy\": \"default:podinfo\"}\n")
	for _, f := range []string{chain.ManifestPath, "clusters/prod/kustomization.yaml"} {
		if body := must(env.FleetGit("show", first+":"+f)); strings.Contains(body, index) {
			t.Errorf("%s carries the index digest %s:\n%s", f, index, body)
		}
	}

	// Another platform for the same tag: with IfNotPresent the digest is
	// looked up again only because the platform changed, and the next
	// commit carries amd64's manifest.
	c := env.Cluster.Client
	p := &imagev1.ImagePolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "podinfo"}, p); err != nil {
		t.Fatal(err)
	}
	if p.Status.LatestRef == nil || p.Status.LatestRef.Digest != arm64 {
		t.Errorf("latestRef %+v, want 6.4.0@%s", p.Status.LatestRef, arm64)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.Platform = "linux/amd64"
	if err := c.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	second := waitHead(t, env, "main", first)
	checkCommit(t, env, second, first, "imagebot <imagebot@example.com>",
		fmt.Sprintf("Update images in default/fleet\n\n- %[1]s -> %[2]s\n- %[3]s:6.4.0@%[1]s -> %[3]s:6.4.0@%[2]s\n", arm64, amd64, host),
		"-"+fmt.Sprintf(digestLine, arm64)+"\n"+
			"+"+fmt.Sprintf(digestLine, amd64)+"\n"+
			"-        image: "+host+":6.4.0@"+arm64+" # {\"$imagepolicy\": \"default:podinfo\"}\n"+
			"+        image: "+host+":6.4.0@"+amd64+" # {\"$imagepolicy\": \"default:podinfo\"}\n")
}

// withSamplePolicy replaces the policy of the sample ImagePolicy podinfo
// (semver 6.x) with spec lines, failing when the sample no longer reads
// as this expects (a silent no-op would test the sample instead).
func withSamplePolicy(t *testing.T, samples, spec string) string {
	t.Helper()
	const sample = "  policy:\n    semver:\n      range: \">=6.0.0 <7.0.0\"\n"
	if n := strings.Count(samples, sample); n != 1 {
		t.Fatalf("the samples hold the podinfo policy %d times, want 1:\n%s", n, samples)
	}
	return strings.Replace(samples, sample, spec, 1)
}

// extendSamplePolicy adds spec lines to the sample ImagePolicy podinfo,
// keeping its semver policy.
func extendSamplePolicy(t *testing.T, samples, spec string) string {
	t.Helper()
	const sample = "  policy:\n    semver:\n      range: \">=6.0.0 <7.0.0\"\n"
	return withSamplePolicy(t, samples, sample+spec)
}
