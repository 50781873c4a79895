package meta

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	// tagPattern is an OCI tag, or a chart version of a Helm repository,
	// which may carry build metadata after a '+' (OCI tags cannot: Helm
	// writes it '_'); the API's own pattern for Tag.
	tagPattern    = regexp.MustCompile(`^[\w][\w.+-]{0,127}$`)
	digestPattern = regexp.MustCompile(`^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
	hexPattern    = regexp.MustCompile(`^[0-9a-f]+$`)
)

// CheckTagAndDigest validates what of a reference needs no registry
// grammar: a name without white space, the tag as an OCI tag or a chart
// version, the digest as ALGORITHM:ENCODED (hexadecimal for sha256 and
// sha512; its length is not checked). An image name's own grammar is
// setters.CheckImage's, by go-containerregistry; this part serves the
// packages that link no network code (pkg/writeback), where a tag such as
// "5000/acme/web:9" (an address cut at its port) must still be refused.
func (r ImageRef) CheckTagAndDigest() error {
	switch {
	case r.Name == "":
		return fmt.Errorf(`invalid image name "": no name before the tag`)
	case strings.ContainsAny(r.Name, " \t\r\n"):
		return fmt.Errorf("invalid image name %q: it holds white space", r.Name)
	case !tagPattern.MatchString(r.Tag):
		return fmt.Errorf("invalid tag %q (a tag is letters, digits, '_', '.', '-' and '+', and no '/' or ':')", r.Tag)
	case r.Digest == "":
		return nil
	case !digestPattern.MatchString(r.Digest):
		return fmt.Errorf("invalid digest %q", r.Digest)
	}
	if alg, enc, _ := strings.Cut(r.Digest, ":"); (alg == "sha256" || alg == "sha512") && !hexPattern.MatchString(enc) {
		return fmt.Errorf("invalid digest %q: a %s digest is hexadecimal", r.Digest, alg)
	}
	return nil
}

// ApprovalKey is what an approval of the image names: its digest, or its
// tag when it has none.
func (r ImageRef) ApprovalKey() string {
	if r.Digest != "" {
		return r.Digest
	}
	return r.Tag
}
