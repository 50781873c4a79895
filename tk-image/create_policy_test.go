package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// create policy writes spec.minimumAge, spec.platform and
// policy.newestBuild from the flags policy eval takes for them, leaving
// unset what was not given (the API's defaults: source seen, maxCandidates
// 100) as a hand-written policy would.
func TestCreatePolicyTimeAndPlatform(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	const head = `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: app
  namespace: apps
spec:
`
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"soak time", []string{"--semver", "6.x", "--minimum-age", "72h"}, `  imageRepositoryRef:
    name: app
  minimumAge:
    duration: 72h0m0s
  policy:
    semver:
      range: 6.x
`},
		{"newest build by build time", []string{"--newest-build", "--max-candidates", "50", "--minimum-age", "24h", "--age-source", "created"}, `  imageRepositoryRef:
    name: app
  minimumAge:
    duration: 24h0m0s
    source: created
  policy:
    newestBuild:
      maxCandidates: 50
`},
		{"newest build, default limit", []string{"--newest-build", "--filter-pattern", "^main-"}, `  filterTags:
    pattern: ^main-
  imageRepositoryRef:
    name: app
  policy:
    newestBuild: {}
`},
		{"docker-style versions", []string{"--docker", ">=7.2 <8", "--compatible-with", "7.2-alpine"}, `  imageRepositoryRef:
    name: app
  policy:
    docker:
      compatibleWith: 7.2-alpine
      range: '>=7.2 <8'
`},
		{"docker-style versions, any shape", []string{"--docker", ">=1.36"}, `  imageRepositoryRef:
    name: app
  policy:
    docker:
      range: '>=1.36'
`},
		{"cosign keys", []string{"--semver", "6.x", "--verify-provider", "cosign", "--verify-secret-ref", "cosign-keys"}, `  imageRepositoryRef:
    name: app
  policy:
    semver:
      range: 6.x
  verify:
    provider: cosign
    secretRef:
      name: cosign-keys
`},
		{"cosign keyless", []string{"--semver", "6.x", "--verify-provider", "cosign", "--verify-issuer", "^https://token.actions.githubusercontent.com$",
			"--verify-subject", "^https://github.com/org/app/", "--verify-trusted-root-secret-ref", "root"}, `  imageRepositoryRef:
    name: app
  policy:
    semver:
      range: 6.x
  verify:
    matchOIDCIdentity:
    - issuer: ^https://token.actions.githubusercontent.com$
      subject: ^https://github.com/org/app/
    provider: cosign
    trustedRootSecretRef:
      name: root
`},
		{"notation", []string{"--semver", "6.x", "--verify-provider", "notation", "--verify-secret-ref", "ca", "--verify-trust-policy-ref", "policy"}, `  imageRepositoryRef:
    name: app
  policy:
    semver:
      range: 6.x
  verify:
    provider: notation
    secretRef:
      name: ca
    trustPolicyRef:
      name: policy
`},
		{"platform digest", []string{"--semver", "6.x", "--digest-reflection", "IfNotPresent", "--platform", "linux/arm64"}, `  digestReflectionPolicy: IfNotPresent
  imageRepositoryRef:
    name: app
  platform: linux/arm64
  policy:
    semver:
      range: 6.x
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"create", "policy", "app", "-n", "apps", "--repository", "app", "--export"}, tt.args...)
			code, out, errs := runCLI(t, "", args...)
			if code != 0 || out != head+tt.want {
				t.Errorf("code %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errs, out, head+tt.want)
			}
		})
	}
}

// A flag that only qualifies another is refused alone rather than dropped
// without a word, and values the API would refuse are refused before any
// call, by create and eval alike (--export and eval reach no API server).
func TestPolicyFlagErrors(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	create := []string{"create", "policy", "app", "--repository", "app", "--export"}
	eval := []string{"policy", "eval"}
	tests := []struct {
		cmd  []string
		args []string
		errs string
	}{
		{create, []string{"--semver", "6.x", "--age-source", "created"}, "--age-source needs --minimum-age"},
		{create, []string{"--semver", "6.x", "--minimum-age", "1h", "--age-source", "pushed"}, "--age-source must be seen or created"},
		{create, []string{"--semver", "6.x", "--minimum-age", "-1h"}, "--minimum-age cannot be negative"},
		{create, []string{"--semver", "6.x", "--max-candidates", "10"}, "--max-candidates needs --newest-build"},
		{create, []string{"--semver", "6.x", "--compatible-with", "7.2-alpine"}, "--compatible-with needs --docker"},
		{create, []string{"--docker", "*", "--compatible-with", "alpine"}, `--compatible-with "alpine" is not a Docker-style version`},
		{create, []string{"--newest-build", "--max-candidates", "0"}, "--max-candidates must be between 1 and 1000"},
		{create, []string{"--newest-build", "--max-candidates", "1001"}, "--max-candidates must be between 1 and 1000"},
		{create, []string{"--semver", "6.x", "--verify-secret-ref", "keys"}, "--verify-* flags need --verify-provider"},
		{create, []string{"--semver", "6.x", "--verify-provider", "cosign"}, "cosign needs --verify-secret-ref"},
		{create, []string{"--semver", "6.x", "--verify-provider", "cosign", "--verify-secret-ref", "k", "--verify-issuer", "i", "--verify-subject", "s"}, "not both"},
		{create, []string{"--semver", "6.x", "--verify-provider", "cosign", "--verify-issuer", "i"}, "--verify-issuer and --verify-subject go together"},
		{create, []string{"--semver", "6.x", "--verify-provider", "notation", "--verify-secret-ref", "ca"}, "notation needs --verify-secret-ref (certificates) and --verify-trust-policy-ref"},
		{create, []string{"--semver", "6.x", "--verify-provider", "gpg"}, `--verify-provider "gpg": cosign or notation`},
		{eval, []string{"--semver", "6.x", "--max-candidates", "10"}, "--max-candidates needs --newest-build"},
		{eval, []string{"--semver", "6.x", "--age-source", "created"}, "--age-source needs --minimum-age"},
	}
	for _, tt := range tests {
		args := append(append([]string(nil), tt.cmd...), tt.args...)
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, "", args...)
			if code != 2 || out != "" || !strings.Contains(errs, tt.errs) {
				t.Errorf("code %d, stdout %q, stderr %q; want 2, nothing, %q", code, out, errs, tt.errs)
			}
		})
	}
}

// The shell completes the new policy flags that take a fixed value, in
// both commands that take them.
func TestPolicyFlagCompletion(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"create", "policy", "p", "--age-source", ""}, []string{"seen", "created"}},
		{[]string{"policy", "eval", "--age-source", ""}, []string{"seen", "created"}},
		{[]string{"create", "policy", "p", "--platform", ""}, commonPlatforms},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, "", append([]string{"__complete"}, tt.args...)...)
			want := strings.Join(tt.want, "\n") + "\n:4\n"
			if code != 0 || !strings.HasPrefix(out, want) {
				t.Errorf("code %d, stderr %q, stdout %q; want it to start with %q", code, errs, out, want)
			}
		})
	}
}
