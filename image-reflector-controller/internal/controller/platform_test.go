package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// Against a multi-platform index in a real registry, digest reflection
// writes the index digest by default and the platform's own manifest digest
// with spec.platform (a variant-less platform matching the index's
// variant); a platform the index lacks is PlatformNotFound, naming the ones
// it has; changing the platform of an IfNotPresent policy looks the digest
// up again; the API refuses a platform that is not os/arch[/variant].
func TestPlatformDigest(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	index, per := reg.PushIndex(t, "multi", "1.0.0", time.Now().Add(-time.Hour), "linux/amd64", "linux/arm64/v8")
	ns := namespace(t)
	repo := repoFor(ns, "multi", reg, "multi")
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)

	tests := []struct {
		name     string
		platform string
		policy   imagev1.ReflectionPolicy
		reason   string
		digest   string
	}{
		{"index by default", "", imagev1.ReflectIfNotPresent, conditions.SucceededReason, index},
		{"amd64", "linux/amd64", imagev1.ReflectIfNotPresent, conditions.SucceededReason, per["linux/amd64"]},
		{"arm64 matches arm64/v8", "linux/arm64", imagev1.ReflectAlways, conditions.SucceededReason, per["linux/arm64/v8"]},
		{"missing platform", "linux/s390x", imagev1.ReflectIfNotPresent, imagev1.PlatformNotFoundReason, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := policyFor(ns, strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "/", "-"), "multi", semverChoice("*"))
			p.Spec.Platform = tc.platform
			p.Spec.DigestReflectionPolicy = tc.policy
			if tc.policy == imagev1.ReflectAlways {
				p.Spec.Interval = &metav1.Duration{Duration: time.Hour}
			}
			create(t, p)
			cond := waitReason(t, p, tc.reason)
			if tc.digest == "" {
				if !strings.Contains(cond.Message, "linux/amd64, linux/arm64/v8") {
					t.Errorf("message %q does not name the platforms the index has", cond.Message)
				}
				return
			}
			if p.Status.LatestRef.Digest != tc.digest {
				t.Errorf("digest %s; want %s", p.Status.LatestRef.Digest, tc.digest)
			}
		})
	}

	p := &imagev1.ImagePolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "index-by-default"}, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Platform = "linux/arm64/v8"
	if err := env.Client.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p)
		return p.Status.LatestRef.Digest == per["linux/arm64/v8"], err
	})

	for _, bad := range []string{"linux", "Linux/amd64", "linux/amd64/v8/x", "linux/"} {
		b := policyFor(ns, "bad", "multi", semverChoice("*"))
		b.Spec.Platform = bad
		env.ExpectInvalid(t, b, "spec.platform")
	}
}
