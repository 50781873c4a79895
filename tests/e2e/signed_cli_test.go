package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// Keyed cosign (the legacy .sig format, as cosign v2 and older sign) and
// Notation through the three controllers, signed by the real CLIs (make
// sign-tools; make test-integrations runs this, make test skips it): the
// signed 6.4.0 moves git with the digest that verified, and the newer
// 6.5.0, signed by a key or CA the policy does not trust, does not; the
// policy names it Untrusted.
func TestChainKeyedAndNotationSignatures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sign   func(t *testing.T) (trusted, other func(ref string), objects []client.Object)
		verify string
	}{
		{"cosign key", func(t *testing.T) (func(string), func(string), []client.Object) {
			c, mallory := testsign.NewCosign(t), testsign.NewCosign(t)
			return func(ref string) { c.Sign(t, ref, testsign.Legacy) },
				func(ref string) { mallory.Sign(t, ref, testsign.Legacy) },
				[]client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "keys"},
					Data: map[string][]byte{"release.pub": c.PublicKey}}}
		}, "  verify:\n    provider: cosign\n    secretRef:\n      name: keys\n"},
		{"notation", func(t *testing.T) (func(string), func(string), []client.Object) {
			n, mallory := testsign.NewNotation(t, "release"), testsign.NewNotation(t, "mallory")
			return func(ref string) { n.Sign(t, ref) }, func(ref string) { mallory.Sign(t, ref) },
				[]client.Object{
					&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ca"},
						Data: map[string][]byte{"ca.crt": n.Certificate}},
					&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "trust"},
						Data: map[string]string{"trustpolicy.json": string(testsign.TrustPolicy("release", "*"))}},
				}
		}, "  verify:\n    provider: notation\n    secretRef:\n      name: ca\n    trustPolicyRef:\n      name: trust\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			trusted, other, objects := tc.sign(t)
			reg := testregistry.New(t, testregistry.Options{})
			d640 := reg.Push(t, chain.Image, "6.4.0")
			trusted(reg.Repo(chain.Image) + "@" + d640)
			d650 := reg.Push(t, chain.Image, "6.5.0")
			other(reg.Repo(chain.Image) + "@" + d650)
			env, root := startChain(ctx, t, nil, chain.Options{RegistryHost: reg.Host})
			c := env.Cluster.Client
			for _, o := range objects {
				if err := c.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			start := strings.TrimSpace(must(env.FleetGit("rev-parse", "main")))
			samples, err := env.Samples(root)
			if err != nil {
				t.Fatal(err)
			}
			if err := env.Apply(ctx, extendSamplePolicy(t, samples, tc.verify)); err != nil {
				t.Fatal(err)
			}
			head := waitHead(t, env, "main", start)
			body := must(env.FleetGit("show", head+":"+chain.ManifestPath))
			if !strings.Contains(body, env.RegistryHost+"/"+chain.Image+":6.4.0@"+d640) || strings.Contains(body, "6.5.0") {
				t.Fatalf("the commit does not write the verified 6.4.0@%s alone:\n%s", d640, body)
			}
			p := &imagev1.ImagePolicy{}
			testenv.Eventually(t, time.Minute, func() (bool, error) {
				err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "podinfo"}, p)
				return err == nil && p.Status.UnverifiedRef != nil, err
			})
			if u := p.Status.UnverifiedRef; u.Tag != "6.5.0" || u.Reason != "Untrusted" {
				t.Errorf("unverifiedRef %+v, want 6.5.0 Untrusted", u)
			}
			if v := p.Status.Verification; v == nil || v.Digest != d640 {
				t.Errorf("verification %+v, want %s", v, d640)
			}
		})
	}
}
