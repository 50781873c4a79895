package argocd

import (
	"fmt"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// KustomizeImage is one entry of kustomize.images, Argo CD's image override
// for Kustomize applications, which it hands to `kustomize edit set image`:
// name=newName:tag@digest, name:tag, name@digest, or name=newName.
type KustomizeImage struct {
	// Name is the image name the manifests use; kustomize matches it.
	Name string
	// NewName replaces the name; empty keeps it.
	NewName string
	// NewTag and Digest replace the tag and pin the digest; empty keeps
	// what the manifests say.
	NewTag string
	Digest string
}

// ParseKustomizeImage reads an entry the way `kustomize edit set image`
// does: the name is what precedes the first '='; a digest follows '@'; a tag
// follows the last ':' after the last '/'.
func ParseKustomizeImage(s string) (KustomizeImage, error) {
	name, value, renamed := strings.Cut(s, "=")
	if !renamed {
		value = s
	}
	ref, digest, pinned := strings.Cut(value, "@")
	ref, tag, tagged := splitTag(ref)
	if (pinned && digest == "") || (tagged && tag == "") {
		return KustomizeImage{}, fmt.Errorf("kustomize image %q: an empty tag or digest", s)
	}
	img := KustomizeImage{Name: name, NewTag: tag, Digest: digest}
	if renamed && ref != name { // a rename to itself is none
		img.NewName = ref
	} else if !renamed {
		img.Name = ref
	}
	if img.Name == "" || strings.ContainsAny(img.Name, " \t\n") {
		return KustomizeImage{}, fmt.Errorf("kustomize image %q: no image name", s)
	}
	if _, _, tagged := splitTag(img.Name); tagged || strings.Contains(img.Name, "@") {
		return KustomizeImage{}, fmt.Errorf("kustomize image %q: the name %q carries a tag or digest", s, img.Name)
	}
	return img, nil
}

// splitTag splits a tag off ref: the text after the last ':' that follows
// the last '/', so a registry's port is not taken for a tag.
func splitTag(ref string) (name, tag string, tagged bool) {
	i := strings.LastIndexByte(ref, ':')
	if i < 0 || i < strings.LastIndexByte(ref, '/') {
		return ref, "", false
	}
	return ref[:i], ref[i+1:], true
}

// String is the entry as Argo CD and image-updater write it.
func (i KustomizeImage) String() string {
	s := i.Name
	switch {
	case i.NewName != "" && i.NewName != i.Name:
		s += "=" + i.NewName
	case strings.Contains(i.NewTag+i.Digest, "="):
		s += "=" + i.Name // so that the name ends at the first '='
	}
	if i.NewTag != "" {
		s += ":" + i.NewTag
	}
	if i.Digest != "" {
		s += "@" + i.Digest
	}
	return s
}

// SetKustomizeImage sets the entry for img.Name in kustomize.images,
// replacing it in place or appending it, and reports whether the file
// changed. Other entries keep their text and order.
func (f *File) SetKustomizeImage(img KustomizeImage) (bool, error) {
	if img.Name == "" || (img.NewTag == "" && img.Digest == "" && img.NewName == "") {
		return false, fmt.Errorf("kustomize image %q: needs a name and a new name, tag or digest", img)
	}
	kustomize, err := child(f.root(), "kustomize", yaml.MappingNode, "")
	if err != nil {
		return false, err
	}
	images, err := child(kustomize, "images", yaml.SequenceNode, "kustomize")
	if err != nil {
		return false, err
	}
	want := img.String()
	for n, e := range images.Content {
		cur, err := scalar(e, fmt.Sprintf("kustomize.images[%d]", n))
		if err != nil {
			return false, err
		}
		old, err := ParseKustomizeImage(cur)
		if err != nil {
			return false, err
		}
		if old.Name != img.Name {
			continue
		}
		if old.String() == want { // the same override, perhaps spelt name=name:tag
			return false, nil
		}
		setStr(e, want)
		return true, nil
	}
	images.Content = append(images.Content, str(want))
	return true, nil
}
