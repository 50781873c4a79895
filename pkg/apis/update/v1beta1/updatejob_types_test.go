package v1beta1

import "testing"

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
