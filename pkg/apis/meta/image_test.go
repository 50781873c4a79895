package meta

import (
	"strings"
	"testing"
)

// A tag cut from an address at its port, a tag with a slash, a digest
// that is not hexadecimal are refused; an OCI tag, a chart version with
// build metadata and a sha256 digest pass.
func TestCheckTagAndDigest(t *testing.T) {
	for _, tt := range []struct {
		ref  ImageRef
		want string
	}{
		{ImageRef{Name: "ghcr.io/org/app", Tag: "1.2.0"}, ""},
		{ImageRef{Name: "https://charts.example.com/podinfo", Tag: "6.1.0+build.1"}, ""},
		{ImageRef{Name: "ghcr.io/org/app", Tag: "1.2.0", Digest: "sha256:" + strings.Repeat("ab", 32)}, ""},
		{ImageRef{Name: "127.0.0.1", Tag: "5000/acme/web:9"}, "invalid tag"},
		{ImageRef{Name: "ghcr.io/org/app", Tag: "1.0", Digest: "sha256:xyz"}, "hexadecimal"},
		{ImageRef{Name: "", Tag: "1.0"}, "invalid image name"},
		{ImageRef{Name: "ghcr.io/org app", Tag: "1.0"}, "white space"},
	} {
		err := tt.ref.CheckTagAndDigest()
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.ref, err, tt.want)
		}
	}
}
