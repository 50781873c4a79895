package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// Newest by build time through the three controllers: with policy
// newestBuild, the commit takes the tag whose image was built last, not the
// greatest name (6.3.1, built an hour ago, over 6.9.0, built three hours
// ago); a later push of a lower version built more recently (6.2.0) is
// committed next, while a greater version built long ago (7.0.0) is not.
func TestChainNewestBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// PushBuilt sets each image's config created time; the chain's own
	// registry pushes one image, with one build time, under every tag.
	reg := testregistry.New(t, testregistry.Options{})
	now := time.Now()
	for _, b := range []struct {
		tag string
		age time.Duration
	}{{"6.9.0", 3 * time.Hour}, {"6.5.0", 2 * time.Hour}, {"6.3.1", time.Hour}} {
		reg.PushBuilt(t, chain.Image, b.tag, now.Add(-b.age))
	}
	env, root := startChain(ctx, t, nil, chain.Options{RegistryHost: reg.Host})
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	samples = withSamplePolicy(t, samples, "  policy:\n    newestBuild:\n      maxCandidates: 10\n")
	start := env.Head("main")
	if err := env.Apply(ctx, samples); err != nil {
		t.Fatal(err)
	}
	host := env.RegistryHost + "/" + chain.Image
	change := func(from, to string) (string, string) {
		return fmt.Sprintf("Update images in default/fleet\n\n- %[1]s:%[2]s -> %[1]s:%[3]s\n", host, from, to),
			"-        image: " + host + ":" + from + " # {\"$imagepolicy\": \"default:podinfo\"}\n" +
				"+        image: " + host + ":" + to + " # {\"$imagepolicy\": \"default:podinfo\"}\n"
	}

	first := waitHead(t, env, "main", start)
	msg, diff := change("6.3.0", "6.3.1")
	checkCommit(t, env, first, start, "imagebot <imagebot@example.com>", msg, diff)

	// Two new tags in one scan: 7.0.0 is the greatest version and the last
	// pushed, so only its build time can keep it out; 6.2.0 is the lowest
	// version and the newest build.
	reg.PushBuilt(t, chain.Image, "6.2.0", now.Add(-30*time.Minute))
	reg.PushBuilt(t, chain.Image, "7.0.0", now.Add(-4*time.Hour))
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	if err := env.RequestReconcile(ctx, repo); err != nil {
		t.Fatal(err)
	}
	second := waitHead(t, env, "main", first)
	msg, diff = change("6.3.1", "6.2.0")
	checkCommit(t, env, second, first, "imagebot <imagebot@example.com>", msg, diff)
}
