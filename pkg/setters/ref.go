// Package setters updates image references in YAML files: every scalar
// marked with a comment such as # {"$imagepolicy": "apps:podinfo"} is set to
// the value of that image policy. Only the bytes of replaced values change;
// comments, quoting, indentation, line endings and everything else stay as
// written.
package setters

import (
	"toolkit.dev/image-toolkit/pkg/apis/meta"

	"fmt"
	"regexp"
	"strings"
)

var (
	// An OCI tag, or a chart version of a Helm repository, which may carry
	// build metadata after a '+' (OCI tags cannot: Helm writes it '_').
	tagPattern    = regexp.MustCompile(`^[\w][\w.+-]{0,127}$`)
	digestPattern = regexp.MustCompile(`^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
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
		if !digestPattern.MatchString(img.Digest) {
			return meta.ImageRef{}, fmt.Errorf("%q: invalid digest %q", ref, img.Digest)
		}
	}
	slash := strings.LastIndexByte(rest, '/')
	colon := strings.LastIndexByte(rest, ':')
	if colon <= slash {
		return meta.ImageRef{}, fmt.Errorf("%q: no tag; want IMAGE:TAG or IMAGE:TAG@DIGEST", ref)
	}
	img.Name, img.Tag = rest[:colon], rest[colon+1:]
	if img.Name == "" || strings.ContainsAny(img.Name, " \t\r\n") {
		return meta.ImageRef{}, fmt.Errorf("%q: invalid image name %q", ref, img.Name)
	}
	if !tagPattern.MatchString(img.Tag) {
		return meta.ImageRef{}, fmt.Errorf("%q: invalid tag %q", ref, img.Tag)
	}
	return img, nil
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
