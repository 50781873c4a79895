package gitsource

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// The kinds spec.sourceRef may name are the API's enum: a kind the CRD
// accepts always has a reader, and a reader is never unreachable.
func TestSourceKindsMatchTheAPIEnum(t *testing.T) {
	src, err := os.ReadFile("../apis/image/v1beta1/imageupdateautomation_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`// Kind of the referent\.\n(?:\s*//.*\n)*?\s*// \+kubebuilder:validation:Enum=(\S+)\n`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no Enum marker on CrossNamespaceSourceReference.Kind")
	}
	enum := strings.Split(string(m[1]), ";")
	slices.Sort(enum)
	if !slices.Equal(enum, SourceKindNames()) {
		t.Errorf("the API's sourceRef kinds %v; SourceKinds has %v", enum, SourceKindNames())
	}
}

// A new source kind is its entry: Resolve reads an object of it through
// the real API server with what every kind shares (the automation's
// namespace by default, the apiVersion's group checked, a missing object
// retried) and the entry's reader for the rest.
func TestAnAddedSourceKindNeedsOnlyItsEntry(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "example.toolkit.dev", Version: "v1", Kind: "Repository"}
	SourceKinds[gvk.Kind] = SourceKind{GVK: gvk, Read: func(u *unstructured.Unstructured, src *Source) error {
		src.Repository.URL, _, _ = unstructured.NestedString(u.Object, "spec", "address")
		branch, _, _ := unstructured.NestedString(u.Object, "spec", "trunk")
		src.Ref = updatev1.GitRepositoryRef{Branch: branch}
		return nil
	}}
	t.Cleanup(func() { delete(SourceKinds, gvk.Kind) })

	ns := env.Namespace(t)
	repo := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"address": url, "trunk": "trunk"}}}
	repo.SetGroupVersionKind(gvk)
	repo.SetNamespace(ns)
	repo.SetName("fleet")
	if err := env.Client.Create(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	resolve := func(ref imagev1.CrossNamespaceSourceReference) (*Source, error) {
		a := automation(ns, func(a *imagev1.ImageUpdateAutomation) { a.Spec.SourceRef = &ref })
		return Resolve(context.Background(), env.Client, a, Options{})
	}

	src, err := resolve(imagev1.CrossNamespaceSourceReference{Kind: "Repository", Name: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	if src.Repository.URL != url || src.Ref.Branch != "trunk" || src.Describe != "Repository "+ns+"/fleet" ||
		src.Repository.Timeout == nil || src.Repository.Timeout.Duration != DefaultTimeout {
		t.Errorf("source %+v", src)
	}
	_, err = resolve(imagev1.CrossNamespaceSourceReference{Kind: "Repository", Name: "gone"})
	checkFailure(t, err, failure{imagev1.SourceNotFoundReason, false, "Repository " + ns + "/gone not found"})
	_, err = resolve(imagev1.CrossNamespaceSourceReference{APIVersion: "source.toolkit.fluxcd.io/v1", Kind: "Repository", Name: "fleet"})
	checkFailure(t, err, failure{imagev1.InvalidSourceReason, true, "is not a version of example.toolkit.dev"})
	_, err = resolve(imagev1.CrossNamespaceSourceReference{Kind: "Bucket", Name: "fleet"})
	checkFailure(t, err, failure{imagev1.InvalidSourceReason, true, `"Bucket" is not supported: only Application, GitRepository, Repository`})
}
