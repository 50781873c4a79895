package v1beta1

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// A policy key splits back into what made it; half a key is refused.
func TestPolicyKey(t *testing.T) {
	ns, name, ok := SplitPolicyKey(PolicyKey("apps", "podinfo"))
	if !ok || ns != "apps" || name != "podinfo" {
		t.Errorf("round trip: %q %q %v", ns, name, ok)
	}
	for _, bad := range []string{"", "apps", "apps:", ":podinfo"} {
		if _, _, ok := SplitPolicyKey(bad); ok {
			t.Errorf("SplitPolicyKey(%q) accepted it", bad)
		}
	}
}

// ForgeProviders is the enum of ForgeProvider as the CRD has it: the list
// the front ends offer cannot drift from what the API server accepts.
func TestForgeProvidersAreTheEnum(t *testing.T) {
	src, err := os.ReadFile("git_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\+kubebuilder:validation:Enum=(\S+)\ntype ForgeProvider string`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no Enum marker on ForgeProvider in git_types.go")
	}
	var list []string
	for _, p := range ForgeProviders {
		list = append(list, string(p))
	}
	if got := strings.Join(list, ";"); got != string(m[1]) {
		t.Errorf("ForgeProviders %s, enum %s", got, m[1])
	}
}
