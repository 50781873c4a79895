// Package policytest holds the tag lists of official images that the docker
// policy kind is tested against, so that pkg/policy, discovery, tk-image
// policy eval and the reflector's envtest check one set of vectors and
// must agree on every answer.
package policytest

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

//go:embed official-images.json
var officialImages []byte

// Image is an image's tags and the cases evaluated over them.
type Image struct {
	Image string   `json:"image"`
	Tags  []string `json:"tags"`
	Cases []Case   `json:"cases"`
}

// Case is a docker policy over an image's tags and its answer.
type Case struct {
	// Current is the tag in use, the policy's compatibleWith unless
	// Shapeless.
	Current   string `json:"current"`
	Range     string `json:"range"`
	Shapeless bool   `json:"shapeless"`
	// Mode is the discover mode whose default policy for Current is this
	// one; "" when none is.
	Mode string `json:"mode"`
	// Want is the tag chosen.
	Want string `json:"want"`
	// Never are tags of the list that must not even be candidates.
	Never []string `json:"never"`
}

// CompatibleWith is the case's docker.compatibleWith.
func (c Case) CompatibleWith() string {
	if c.Shapeless {
		return ""
	}
	return c.Current
}

// Name names a case in a subtest: postgres/16.4-alpine/>=16.4_<17.
func (c Case) Name(img Image) string {
	return fmt.Sprintf("%s/%s/%s", img.Image, c.Current, c.Range)
}

// OfficialImages are the vectors; it panics on a malformed file, which
// every test using it would catch at once.
func OfficialImages() []Image {
	var v struct {
		Images []Image `json:"images"`
	}
	if err := json.Unmarshal(officialImages, &v); err != nil {
		panic(fmt.Sprintf("official-images.json: %v", err))
	}
	return v.Images
}
