// Package setters updates image references in YAML files: every scalar
// marked with a comment such as # {"$imagepolicy": "apps:podinfo"} is set to
// the value of that image policy. Only the bytes of replaced values change;
// comments, quoting, indentation, line endings and everything else stay as
// written.
package setters

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

var (
	// Kubernetes object names in markers: namespace:name.
	policyPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
)

// ParseImage parses IMAGE:TAG or IMAGE:TAG@DIGEST. The tag is what follows
// the last colon after the last slash, so a registry port
// (host:5000/app:1.0) is part of the name.
func ParseImage(ref string) (meta.ImageRef, error) {
	var img meta.ImageRef
	rest := ref
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		img.Digest = rest[i+1:]
		rest = rest[:i]
		if img.Digest == "" {
			return meta.ImageRef{}, fmt.Errorf("%q: invalid digest \"\" after '@'", ref)
		}
	}
	slash := strings.LastIndexByte(rest, '/')
	colon := strings.LastIndexByte(rest, ':')
	if colon <= slash {
		return meta.ImageRef{}, fmt.Errorf("%q: no tag; want IMAGE:TAG or IMAGE:TAG@DIGEST", ref)
	}
	img.Name, img.Tag = rest[:colon], rest[colon+1:]
	if err := CheckImage(img); err != nil {
		return meta.ImageRef{}, fmt.Errorf("%q: %w", ref, err)
	}
	return img, nil
}

// CheckImage validates an image reference wherever one enters (a flag, a
// plan, a policy's value), so that no invalid one is written into a file:
// the repository name by go-containerregistry's parser (lower case path
// components, a valid registry; a Helm chart's http(s) URL as it is), the
// tag as an OCI tag or a Helm chart version, the digest as an OCI digest
// in its algorithm's encoding (its length is not checked).
func CheckImage(img meta.ImageRef) error {
	if err := img.CheckTagAndDigest(); err != nil {
		return err
	}
	if strings.HasPrefix(img.Name, "https://") || strings.HasPrefix(img.Name, "http://") {
		return nil // a Helm repository's chart, by its URL
	}
	if _, err := name.NewRepository(img.Name); err != nil {
		return fmt.Errorf("invalid image name %q: %v", img.Name, err)
	}
	return nil
}

// ValidPolicy reports whether s is a NAMESPACE:NAME policy reference.
func ValidPolicy(s string) bool { return policyPattern.MatchString(s) }

// ParsePolicyArg parses NAMESPACE:NAME=REF, the form of tk-image's --policy.
func ParsePolicyArg(arg string) (string, meta.ImageRef, error) {
	policy, ref, ok := strings.Cut(arg, "=")
	if !ok {
		return "", meta.ImageRef{}, fmt.Errorf("%q: want NAMESPACE:NAME=IMAGE:TAG[@DIGEST]", arg)
	}
	if !ValidPolicy(policy) {
		return "", meta.ImageRef{}, fmt.Errorf("%q: policy %q is not NAMESPACE:NAME", arg, policy)
	}
	img, err := ParseImage(ref)
	if err != nil {
		return "", meta.ImageRef{}, err
	}
	return policy, img, nil
}
