package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/policy/policytest"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
)

func TestPolicyEvalStdin(t *testing.T) {
	tags := "  1.0.0\n\nv1.4.2  \n2.0.0\nlatest\nmain-abc-100\nmain-def-99\n"
	tests := []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"--semver", ">=1.0.0 <2.0.0"}, 0, "v1.4.2\n", ""},
		{[]string{"--alphabetical", "desc"}, 0, "1.0.0\n", ""},
		{[]string{"--numerical", "asc", "--filter-pattern", `^main-[a-f0-9]+-(?P<ts>\d+)$`, "--filter-extract", "$ts"}, 0, "main-abc-100\n", ""},
		{[]string{"--semver", ">=3.0.0"}, 1, "", "6 tags considered, 0 dropped by the filter, 6 by the policy"},
		{[]string{"--semver", ">=1 <<2"}, 2, "", `--semver ">=1 <<2": improper constraint`},
		{[]string{"--numerical", "asc", "--filter-pattern", "("}, 2, "", `--filter-pattern "(": error parsing regexp`},
		{[]string{"--semver", "*", "--alphabetical", "asc"}, 2, "", "exactly one of"},
		{[]string{}, 2, "", "exactly one of"},
		{[]string{"--semver", "*", "--docker-config", "x"}, 2, "", "--docker-config needs --image"},
		{[]string{"--docker", ">=1 <2", "--compatible-with", "1.0.0"}, 0, "v1.4.2\n", ""},
		{[]string{"--compatible-with", "1.0.0"}, 2, "", "--compatible-with needs --docker"},
		{[]string{"--docker", "*", "--compatible-with", "latest"}, 2, "", "not a Docker-style version"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, tags, append([]string{"policy", "eval"}, tt.args...)...)
			if code != tt.code || out != tt.out || !strings.Contains(errs, tt.errs) {
				t.Errorf("code %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errs, tt.code, tt.out, tt.errs)
			}
		})
	}
}

func TestPolicyEvalImage(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Username: "bot", Password: "s3cret", PageSize: 2})
	reg.PushTags(t, "team/app", []string{"1.0.0", "1.1.0", "1.2.0-rc.1", "2.0.0", "latest"})

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), reg.DockerConfigJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "policy", "eval", "--image", reg.Repo("team/app"), "--docker-config", dir, "--semver", "1.x")
	if code != 0 || out != "1.1.0\n" {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errs)
	}

	// Anonymous access to a private registry fails with the registry's word.
	code, _, errs = runCLI(t, "", "policy", "eval", "--image", reg.Repo("team/app"), "--semver", "1.x")
	if code != 1 || !strings.Contains(errs, "UNAUTHORIZED") {
		t.Errorf("anonymous: code %d, stderr %q", code, errs)
	}
}

// policy eval with times, from a --tag-times file: a minimum age by first
// sighting or build time picks the best tag old enough and says on stderr
// which one comes next and when when none is; --newest-build orders by
// build time; bad files and flags are usage errors (exit 2).
func TestPolicyEvalTimes(t *testing.T) {
	dir := t.TempDir()
	times := filepath.Join(dir, "times.txt")
	content := `# tag  first seen  built
1.0.0  2026-11-01T00:00:00Z  2026-10-31T00:00:00Z
1.1.0  2026-11-20T00:00:00Z  2026-11-10T00:00:00Z

1.2.0  2026-11-22T00:00:00Z  -
latest 2026-11-22T06:00:00Z  2026-11-22T05:00:00Z
`
	if err := os.WriteFile(times, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("1.0.0 yesterday\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := "--now=2026-11-23T00:00:00Z"
	tests := []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"--semver", "*", "--tag-times", times, now}, 0, "1.2.0\n", ""},
		{[]string{"--semver", "*", "--minimum-age", "48h", "--tag-times", times, now}, 0, "1.1.0\n", ""},
		// Exactly old enough is old enough.
		{[]string{"--semver", "*", "--minimum-age", "72h", "--tag-times", times, now}, 0, "1.1.0\n", ""},
		{[]string{"--semver", "*", "--minimum-age", "73h", "--tag-times", times, now}, 0, "1.0.0\n", ""},
		// 1.1.0 was built 13 days ago; 1.2.0 has no build time: its
		// first sighting counts.
		{[]string{"--semver", "*", "--minimum-age", "72h", "--age-source", "created", "--tag-times", times, now}, 0, "1.1.0\n", ""},
		{[]string{"--semver", "*", "--minimum-age", "30d", "--tag-times", times, now}, 2, "", "invalid argument"},
		{[]string{"--semver", "*", "--minimum-age", "720h", "--tag-times", times, now}, 1, "",
			"none of the 3 matching tags is older than the minimum age 720h0m0s; 1.0.0 will be at 2026-12-01T00:00:00Z"},
		{[]string{"--newest-build", "--tag-times", times, now}, 0, "latest\n", ""},
		{[]string{"--newest-build", "--minimum-age", "24h", "--age-source", "created", "--tag-times", times, now}, 0, "1.2.0\n", ""},
		{[]string{"--newest-build", "--max-candidates", "1", "--tag-times", times, now}, 0, "latest\n", ""},
		{[]string{"--semver", "*", "--minimum-age", "1h"}, 2, "", "need --tag-times"},
		{[]string{"--newest-build"}, 2, "", "need --tag-times"},
		{[]string{"--newest-build", "--semver", "*", "--tag-times", times}, 2, "", "exactly one of"},
		{[]string{"--semver", "*", "--minimum-age", "1h", "--age-source", "pushed", "--tag-times", times}, 2, "", "--age-source"},
		{[]string{"--semver", "*", "--minimum-age", "1h", "--tag-times", bad}, 2, "", "line 1"},
		{[]string{"--semver", "*", "--minimum-age", "1h", "--tag-times", filepath.Join(dir, "missing")}, 2, "", "--tag-times"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, "", append([]string{"policy", "eval"}, tt.args...)...)
			if code != tt.code || out != tt.out || !strings.Contains(errs, tt.errs) {
				t.Errorf("code %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errs, tt.code, tt.out, tt.errs)
			}
		})
	}

	// --explain says what the minimum age held back and what comes next.
	code, out, _ := runCLI(t, "", "policy", "eval", "--semver", "*", "--minimum-age", "48h", "--tag-times", times, now, "--explain")
	want := `Considered:     4 tags
Not a version:  1 (a version needs all three numbers, e.g. 1.2.0)
Out of range:   0 outside "*"
Kept:           3
Too new:        1 ranking higher, younger than the minimum age
Best first:     1.1.0, 1.0.0
Selected:       1.1.0
Pending:        1.2.0 at 2026-11-24T00:00:00Z (minimum age 48h0m0s)
`
	if code != 0 || out != want {
		t.Errorf("code %d, explain:\n%s\nwant:\n%s", code, out, want)
	}
}

// The example: semver skips 1.37, which writes two numbers; docker
// takes it, and explain says what the shape dropped.
func TestPolicyEvalDockerAgainstSemver(t *testing.T) {
	tags := "1.36\n1.36.1\n1.37\n1.35.0\n1.37-musl\nlatest\n"
	for _, tt := range []struct {
		args []string
		out  string
	}{
		{[]string{"--semver", ">=1.36"}, "1.36.1\n"},
		{[]string{"--docker", ">=1.36"}, "1.37\n"},
		{[]string{"--docker", ">=1.36", "--compatible-with", "1.36.1"}, "1.36.1\n"},
		{[]string{"--docker", ">=1.36", "--compatible-with", "1.36", "--explain"}, `Considered:                  6 tags
Not a version of its shape:  4 (of 2 numbers, without a suffix, like 1.36)
Out of range:                0 outside ">=1.36"
Kept:                        2
Best first:                  1.37, 1.36
Selected:                    1.37
`},
	} {
		if code, out, errs := runCLI(t, tags, append([]string{"policy", "eval"}, tt.args...)...); code != 0 || out != tt.out {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want %q", tt.args, code, out, errs, tt.out)
		}
	}
}

// The docker kind's vectors of official images through policy eval: the
// flags and an ImagePolicy manifest (-f FILE, and -f - with --tag-times)
// give the answer pkg/policy and the reflector give.
func TestPolicyEvalDockerOfficialImages(t *testing.T) {
	dir := t.TempDir()
	for _, img := range policytest.OfficialImages() {
		for i, c := range img.Cases {
			t.Run(c.Name(img), func(t *testing.T) {
				args := []string{"policy", "eval", "--docker", c.Range}
				if ref := c.CompatibleWith(); ref != "" {
					args = append(args, "--compatible-with", ref)
				}
				stdin := strings.Join(img.Tags, "\n")
				if code, out, errs := runCLI(t, stdin, args...); code != 0 || out != c.Want+"\n" {
					t.Errorf("flags: code %d, stdout %q, stderr %q; want %s", code, out, errs, c.Want)
				}
				manifest := dockerPolicyManifest(c.Range, c.CompatibleWith())
				file := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", strings.NewReplacer("/", "-", ":", "-").Replace(img.Image), i))
				if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
					t.Fatal(err)
				}
				if code, out, errs := runCLI(t, stdin, "policy", "eval", "-f", file); code != 0 || out != c.Want+"\n" {
					t.Errorf("-f FILE: code %d, stdout %q, stderr %q; want %s", code, out, errs, c.Want)
				}
				times := filepath.Join(dir, "times.txt")
				var lines strings.Builder
				for _, tag := range img.Tags {
					fmt.Fprintf(&lines, "%s 2025-01-01T00:00:00Z\n", tag)
				}
				if err := os.WriteFile(times, []byte(lines.String()), 0o600); err != nil {
					t.Fatal(err)
				}
				if code, out, errs := runCLI(t, manifest, "policy", "eval", "-f", "-", "--tag-times", times); code != 0 || out != c.Want+"\n" {
					t.Errorf("-f -: code %d, stdout %q, stderr %q; want %s", code, out, errs, c.Want)
				}
			})
		}
	}
}

// dockerPolicyManifest is an ImagePolicy of the docker kind, after another
// object, as a file of manifests holds it.
func dockerPolicyManifest(rng, compatibleWith string) string {
	return fmt.Sprintf(`apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: app}
spec: {image: ghcr.io/acme/app}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: app}
spec:
  imageRepositoryRef: {name: app}
  policy:
    docker: {range: %q, compatibleWith: %q}
`, rng, compatibleWith)
}

// -f takes the rules of the first ImagePolicy, its filter and minimum age
// too, and refuses what it cannot evaluate as the API would apply it.
func TestPolicyEvalFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	filtered := write("filtered.yaml", `apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: a}
spec:
  imageRepositoryRef: {name: a}
  filterTags: {pattern: '^main-[a-f0-9]+-(?P<ts>\d+)$', extract: '$ts'}
  policy: {numerical: {order: asc}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: b}
spec:
  imageRepositoryRef: {name: b}
  policy: {alphabetical: {}}
`)
	soaked := write("soaked.yaml", `apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: a}
spec:
  imageRepositoryRef: {name: a}
  minimumAge: {duration: 48h}
  policy: {semver: {range: '*'}}
`)
	times := write("times.txt", "1.0.0 2026-11-20T00:00:00Z\n1.1.0 2026-11-25T00:00:00Z\n")
	typo := write("typo.yaml", "apiVersion: image.toolkit.dev/v1beta1\nkind: ImagePolicy\nmetadata: {name: a}\nspec: {policy: {docker: {range: '*', compatibleWth: '1.2'}}}\n")
	other := write("other.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
	flux := write("flux.yaml", "apiVersion: image.toolkit.fluxcd.io/v1beta2\nkind: ImagePolicy\nmetadata: {name: a}\nspec: {policy: {semver: {range: '*'}}}\n")
	tags := "main-abc-100\nmain-def-99\nlatest\n"
	tests := []struct {
		args      []string
		stdin     string
		code      int
		out, errs string
	}{
		{[]string{"-f", filtered}, tags, 0, "main-abc-100\n", ""},
		{[]string{"-f", soaked, "--tag-times", times, "--now", "2026-11-26T00:00:00Z"}, "", 0, "1.0.0\n", ""},
		{[]string{"-f", filtered, "--semver", "*"}, tags, 2, "", "-f gives the policy: drop --semver"},
		{[]string{"-f", filtered, "--filter-pattern", "x"}, tags, 2, "", "drop --filter-pattern"},
		{[]string{"-f", "-"}, "", 2, "", "give the tags with --image or --tag-times"},
		{[]string{"-f", other}, tags, 2, "", "no ImagePolicy"},
		{[]string{"-f", typo}, tags, 2, "", "spec.policy.docker.compatibleWth: unknown field; known here: compatibleWith, range"},
		{[]string{"-f", flux}, tags, 2, "", "tk-image migrate"},
		{[]string{"-f", filepath.Join(dir, "none.yaml")}, tags, 2, "", "no such file"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, tt.stdin, append([]string{"policy", "eval"}, tt.args...)...)
			if code != tt.code || out != tt.out || !strings.Contains(errs, tt.errs) {
				t.Errorf("code %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errs, tt.code, tt.out, tt.errs)
			}
		})
	}
}

// policy eval --verify-* walks the candidates as the reflector does: the
// best whose signature verifies wins, printed with the digest that
// verified; --explain shows the verification step; nothing verified exits
// 1 saying why. Signed keylessly with sigstore-go's virtual Sigstore (as
// the reflector's tests) with the credentials of --docker-config.
func TestPolicyEvalVerifies(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Username: "bot", Password: "s3cret", Referrers: true})
	s := testsign.NewSigstore(t)
	signed := reg.Push(t, "team/app", "1.0.0")
	reg.Push(t, "team/app", "1.1.0")
	s.SignImage(t, reg, "team/app", signed, "release@example.com", "https://issuer.example.com")
	dir := t.TempDir()
	root := filepath.Join(dir, "trusted_root.json")
	if err := os.WriteFile(root, s.TrustedRoot(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), reg.DockerConfigJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"policy", "eval", "--image", reg.Repo("team/app"), "--docker-config", dir, "--semver", "1.x",
		"--verify-provider", "cosign", "--verify-issuer", "^https://issuer.example.com$", "--verify-trusted-root", root}
	code, out, errs := runCLI(t, "", append(args, "--verify-subject", "^release@example.com$")...)
	if code != 0 || out != "1.0.0@"+signed+"\n" {
		t.Errorf("code %d, stdout %q, stderr %q; want 1.0.0@%s", code, out, errs, signed)
	}
	code, out, errs = runCLI(t, "", append(args, "--verify-subject", "^release@example.com$", "--explain")...)
	if code != 0 || !strings.Contains(out, "Not verified:") || !strings.Contains(out, "1.1.0") || !strings.Contains(out, "NoSignature") ||
		!strings.Contains(out, "Verified:       1.0.0@"+signed+", signed by subject release@example.com") {
		t.Errorf("--explain: code %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	code, _, errs = runCLI(t, "", append(args, "--verify-subject", "^mallory@")...)
	if code != 1 || !strings.Contains(errs, "none of 2 candidate(s) verified") || !strings.Contains(errs, "1.1.0: NoSignature") {
		t.Errorf("wrong identity: code %d, stderr %q", code, errs)
	}
	code, _, errs = runCLI(t, "1.0.0\n", "policy", "eval", "--semver", "1.x", "--verify-provider", "cosign", "--verify-key", root)
	if code != 2 || !strings.Contains(errs, "needs --image") {
		t.Errorf("without --image: code %d, stderr %q", code, errs)
	}
}

// policy eval checks the attestations of --verify-attestations (or of
// -f's spec.verify.attestations) as the reflector does: the newer tag
// whose provenance names another repository is skipped with the rule and
// the values, the older one wins, and --explain says what its provenance
// said. A rules file with a typo is a usage error naming the field.
func TestPolicyEvalChecksProvenance(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	s := testsign.NewSigstore(t)
	const iss, sub = "https://issuer.example.com", "release@example.com"
	good, evil := reg.Push(t, "team/app", "1.0.0"), reg.Push(t, "team/app", "1.1.0")
	for d, repo := range map[string]string{good: "acme/api", evil: "evil/fork"} {
		s.SignImage(t, reg, "team/app", d, sub, iss)
		s.AttestImage(t, reg, "team/app", d, sub, iss, "https://slsa.dev/provenance/v1", testsign.SLSAProvenance(repo, "refs/heads/main", "0123456789abcdef0123456789abcdef01234567"))
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	root := write("trusted_root.json", string(s.TrustedRoot(t)))
	rules := write("rules.yaml", "- name: provenance\n  predicateType: slsaprovenance1\n  slsa:\n    sourceRepository: github.com/acme/*\n    sourceRef: refs/heads/main\n")
	verify := []string{"--image", reg.Repo("team/app"), "--verify-provider", "cosign", "--verify-issuer", "^" + iss + "$",
		"--verify-subject", "^" + sub + "$", "--verify-trusted-root", root}

	code, out, errs := runCLI(t, "", append([]string{"policy", "eval", "--semver", "1.x", "--verify-attestations", rules, "--explain"}, verify...)...)
	for _, want := range []string{"Not verified:", "1.1.0", "ProvenanceMismatch: attestation provenance (https://slsa.dev/provenance/v1): source repository github.com/evil/fork does not match github.com/acme/*",
		"Verified:       1.0.0@" + good, "Attested:       provenance (https://slsa.dev/provenance/v1, bundle) signed by subject release@example.com",
		"from github.com/acme/api refs/heads/main at 0123456789abcdef0123456789abcdef01234567"} {
		if !strings.Contains(out, want) {
			t.Errorf("--explain does not say %q: code %d, stderr %q, stdout:\n%s", want, code, errs, out)
		}
	}
	// The same rules from the policy's own manifest.
	policy := write("policy.yaml", "apiVersion: image.toolkit.dev/v1beta1\nkind: ImagePolicy\nmetadata: {name: app}\nspec:\n  imageRepositoryRef: {name: app}\n"+
		"  policy: {semver: {range: 1.x}}\n  verify:\n    provider: cosign\n    attestations:\n    - name: provenance\n      predicateType: slsaprovenance1\n      slsa: {sourceRepository: 'github.com/acme/*'}\n")
	code, out, errs = runCLI(t, "", append([]string{"policy", "eval", "-f", policy}, verify...)...)
	if code != 0 || out != "1.0.0@"+good+"\n" {
		t.Errorf("-f: code %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = runCLI(t, "", append([]string{"policy", "eval", "-f", policy, "--verify-attestations", rules}, verify...)...)
	if code != 2 || !strings.Contains(errs, "drop --verify-attestations") {
		t.Errorf("-f and --verify-attestations: code %d, stderr %q", code, errs)
	}
	typo := write("typo.yaml", "- name: provenance\n  predicateType: slsaprovenance1\n  slsa: {sourceRepo: x}\n")
	code, _, errs = runCLI(t, "", append([]string{"policy", "eval", "--semver", "1.x", "--verify-attestations", typo}, verify...)...)
	if code != 2 || !strings.Contains(errs, "sourceRepo") {
		t.Errorf("a typo in the rules: code %d, stderr %q", code, errs)
	}
}

// policy eval with a cosign key set and with Notation's certificates and
// trust policy, signed by the real CLIs (make sign-tools; skipped
// without): the best tag signed by a trusted key or CA wins; one signed by
// another is named Untrusted.
func TestPolicyEvalVerifiesKeysAndNotation(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("cosign keys", func(t *testing.T) {
		c, other := testsign.NewCosign(t), testsign.NewCosign(t)
		reg := testregistry.New(t, testregistry.Options{Referrers: true})
		signed := reg.Push(t, "app", "1.0.0")
		c.Sign(t, reg.Repo("app")+"@"+signed, testsign.Bundle)
		d11 := reg.Push(t, "app", "1.1.0")
		other.Sign(t, reg.Repo("app")+"@"+d11, testsign.Legacy)
		code, out, errs := runCLI(t, "", "policy", "eval", "--image", reg.Repo("app"), "--semver", "1.x", "--explain",
			"--verify-provider", "cosign", "--verify-key", write("release.pub", c.PublicKey))
		if code != 0 || !strings.Contains(out, "Verified:       1.0.0@"+signed+", signed by key release.pub") ||
			!strings.Contains(out, "1.1.0") || !strings.Contains(out, "Untrusted") {
			t.Errorf("code %d, stderr %q, stdout:\n%s", code, errs, out)
		}
	})
	t.Run("notation", func(t *testing.T) {
		n, other := testsign.NewNotation(t, "release"), testsign.NewNotation(t, "other")
		reg := testregistry.New(t, testregistry.Options{Referrers: true})
		signed := reg.Push(t, "app", "1.0.0")
		n.Sign(t, reg.Repo("app")+"@"+signed)
		d11 := reg.Push(t, "app", "1.1.0")
		other.Sign(t, reg.Repo("app")+"@"+d11)
		code, out, errs := runCLI(t, "", "policy", "eval", "--image", reg.Repo("app"), "--semver", "1.x", "--explain",
			"--verify-provider", "notation", "--verify-cert", write("ca.crt", n.Certificate),
			"--verify-trust-policy", write("trustpolicy.json", testsign.TrustPolicy("release", "*")))
		if code != 0 || !strings.Contains(out, "Verified:       1.0.0@"+signed) ||
			!strings.Contains(out, "1.1.0") || !strings.Contains(out, "Untrusted") {
			t.Errorf("code %d, stderr %q, stdout:\n%s", code, errs, out)
		}
	})
}
