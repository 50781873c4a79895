package argocd

import (
	"reflect"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Update writes what Argo CD reads for each source type, keeps what else
// the file holds, and reports each changed value with its setter.
func TestUpdateWritesTheSourceTypesOverride(t *testing.T) {
	podinfo := meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.1"}
	for _, tc := range []struct {
		name, typ, in, want string
		images              []Image
		changes             []meta.Change
	}{
		{
			name: "kustomize, new file", typ: TypeKustomize,
			images:  []Image{{Setter: "apps:podinfo", ImageRef: podinfo}},
			want:    "kustomize:\n  images:\n  - ghcr.io/stefanprodan/podinfo:6.5.1\n",
			changes: []meta.Change{{NewValue: "ghcr.io/stefanprodan/podinfo:6.5.1", Setter: "apps:podinfo"}},
		},
		{
			name: "kustomize, the manifests' spelling is matched and renamed", typ: TypeKustomize,
			in:      "# kept\nkustomize:\n  images:\n  - podinfo:6.5.0\n  - redis:7\n",
			images:  []Image{{Setter: "apps:podinfo", ImageRef: podinfo, ArgoCDImageFields: meta.ArgoCDImageFields{KustomizeName: "podinfo"}}},
			want:    "# kept\nkustomize:\n  images:\n  - podinfo=ghcr.io/stefanprodan/podinfo:6.5.1\n  - redis:7\n",
			changes: []meta.Change{{OldValue: "podinfo:6.5.0", NewValue: "podinfo=ghcr.io/stefanprodan/podinfo:6.5.1", Setter: "apps:podinfo"}},
		},
		{
			name: "helm, default parameters, other parameters kept", typ: TypeHelm,
			in:     "helm:\n  parameters:\n  - name: image.tag\n    value: 6.5.0\n    forcestring: true\n  - name: replicas\n    value: \"2\"\n    forcestring: false\n",
			images: []Image{{Setter: "apps:podinfo", ImageRef: podinfo}},
			want: "helm:\n  parameters:\n  - name: image.repository\n    value: ghcr.io/stefanprodan/podinfo\n    forcestring: true\n" +
				"  - name: image.tag\n    value: 6.5.1\n    forcestring: true\n  - name: replicas\n    value: \"2\"\n    forcestring: false\n",
			changes: []meta.Change{{NewValue: "ghcr.io/stefanprodan/podinfo", Setter: "apps:podinfo"}, {OldValue: "6.5.0", NewValue: "6.5.1", Setter: "apps:podinfo"}},
		},
		{
			name: "helm, one spec parameter with a digest", typ: TypeHelm,
			images:  []Image{{Setter: "apps:podinfo", ImageRef: meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.1", Digest: "sha256:" + sha}, ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageSpec: "podinfo.image"}}},
			want:    "helm:\n  parameters:\n  - name: podinfo.image\n    value: ghcr.io/stefanprodan/podinfo:6.5.1@sha256:" + sha + "\n    forcestring: true\n",
			changes: []meta.Change{{NewValue: "ghcr.io/stefanprodan/podinfo:6.5.1@sha256:" + sha, Setter: "apps:podinfo"}},
		},
		{
			name: "up to date: no change", typ: TypeKustomize,
			in:     "kustomize:\n  images:\n  - ghcr.io/stefanprodan/podinfo:6.5.1\n",
			images: []Image{{Setter: "apps:podinfo", ImageRef: podinfo}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changes, err := Update([]byte(tc.in), tc.typ, tc.images)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Errorf("file:\n%s\nwant:\n%s", out, tc.want)
			}
			if !reflect.DeepEqual(changes, tc.changes) {
				t.Errorf("changes %+v, want %+v", changes, tc.changes)
			}
			if out == nil {
				return
			}
			// What was written is what Argo CD reads back.
			f, err := Parse(out)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.KustomizeImages(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestUpdateRefusesSourceTypesWithoutOverrides(t *testing.T) {
	_, _, err := Update(nil, "Directory", []Image{{ImageRef: meta.ImageRef{Name: "nginx", Tag: "1"}}})
	if err == nil {
		t.Fatal("a Directory source took an image override")
	}
}

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
