package cluster

import (
	"slices"
	"strings"
	"testing"
)

// Stop deletes the CNI plugin's masquerade rules by replaying the lines of
// iptables -S with -D: the comment, quoted with escaped quotes inside,
// must come back as one argument.
func TestSplitRule(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`POSTROUTING -s 10.244.0.5/32 -m comment --comment "name: \"image-toolkit-test\" id: \"abc\"" -j CNI-1a2b`,
			[]string{"POSTROUTING", "-s", "10.244.0.5/32", "-m", "comment", "--comment", `name: "image-toolkit-test" id: "abc"`, "-j", "CNI-1a2b"}},
		{`INPUT -j KUBE-FIREWALL`, []string{"INPUT", "-j", "KUBE-FIREWALL"}},
		{`X --comment ""`, []string{"X", "--comment", ""}},
	} {
		if got := splitRule(tc.line); !slices.Equal(got, tc.want) {
			t.Errorf("splitRule(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

// Mount points in /proc/self/mountinfo escape spaces and tabs in octal.
func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/tmp/a\040b`: "/tmp/a b", `/plain`: "/plain", `/t\011x`: "/t\tx"} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// Without the tool builds, Check names the make targets that make them,
// instead of a test skipping silently.
func TestCheckNamesWhatIsMissing(t *testing.T) {
	err := Check(t.TempDir())
	if err == nil {
		t.Fatal("Check passed on an empty repository root")
	}
	for _, want := range []string{"bin/testenv/kube-apiserver (make testenv)", "bin/node/kubelet (make node-tools)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}
