package testenv

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// RequireToolsEnv names the make targets whose tools a run promises,
// separated by spaces (e.g. "browser-tools argocd-tools").
//
// make test builds every tool its tests need except the heavy third-party
// builds (Argo CD, Flux's controllers and CLI: minutes each on a new
// machine), which have their own target, make test-integrations, so that a
// cold make test stays within CI's budget. A test that needs one of those
// tools skips without it, saying which target builds it; a run that
// promised the target fails instead, so that a broken build cannot pass as
// a skip.
const RequireToolsEnv = "IMAGE_TOOLKIT_REQUIRE_TOOLS"

// NeedTool skips t when path, which make target builds, is missing, or
// fails it when the run promised target (RequireToolsEnv).
func NeedTool(t testing.TB, path, target string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, path, target)
	}
}

// Missing skips t for want of what, which make target provides, or fails
// it when the run promised target (RequireToolsEnv).
func Missing(t testing.TB, what, target string) {
	t.Helper()
	if slices.Contains(strings.Fields(os.Getenv(RequireToolsEnv)), target) {
		t.Fatalf("%s is missing although this run promised make %s", what, target)
	}
	t.Skipf("%s is missing: make %s provides it (make test-integrations runs every test that needs such a tool)", what, target)
}
