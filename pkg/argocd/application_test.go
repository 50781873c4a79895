package argocd

import (
	"reflect"
	"strings"
	"testing"
)

func TestReadApplicationReadsEachRenderedSource(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       Application
		files      []string
	}{
		{
			name: "one source",
			json: `{"kind":"Application","metadata":{"name":"podinfo","namespace":"argocd"},
				"spec":{"source":{"repoURL":"https://git.example.com/apps.git","path":"podinfo","targetRevision":"main"}},
				"status":{"sourceType":"Kustomize","summary":{"images":["ghcr.io/stefanprodan/podinfo:6.5.0"]}}}`,
			want: Application{Name: "podinfo", Namespace: "argocd",
				Sources: []Source{{RepoURL: "https://git.example.com/apps.git", Path: "podinfo", TargetRevision: "main", Type: "Kustomize"}},
				Images:  []string{"ghcr.io/stefanprodan/podinfo:6.5.0"}},
			files: []string{"podinfo/.argocd-source-podinfo.yaml"},
		},
		{
			name: "several sources: a ref-only source is skipped, a chart has no file, types follow spec order",
			json: `{"metadata":{"name":"shop","namespace":"team-a"},
				"spec":{"sources":[
					{"repoURL":"https://charts.example.com","chart":"shop","targetRevision":"1.2.0"},
					{"repoURL":"https://git.example.com/values.git","targetRevision":"main","ref":"values"},
					{"repoURL":"https://git.example.com/apps.git","path":"shop/overlays/prod","targetRevision":"main"}]},
				"status":{"sourceTypes":["Helm","Directory","Kustomize"]}}`,
			want: Application{Name: "shop", Namespace: "team-a", Sources: []Source{
				{Index: 0, RepoURL: "https://charts.example.com", Chart: "shop", TargetRevision: "1.2.0", Type: "Helm"},
				{Index: 2, RepoURL: "https://git.example.com/apps.git", Path: "shop/overlays/prod", TargetRevision: "main", Type: "Kustomize"},
			}},
			// Outside Argo CD's namespace the file carries namespace_name.
			files: []string{"", "shop/overlays/prod/.argocd-source-team-a_shop.yaml"},
		},
		{
			name: "helm: values set as a string, the names of its parameters",
			json: `{"metadata":{"name":"api","namespace":"argocd"},
				"spec":{"sources":[
					{"repoURL":"https://git.example.com/apps.git","path":"api","targetRevision":"main",
					 "helm":{"values":"replicas: 2\n","parameters":[{"name":"image.tag","value":"1"},{"name":"replicas","value":"3"}]}},
					{"repoURL":"https://git.example.com/apps.git","path":"web","targetRevision":"main",
					 "helm":{"values":"ignored: true\n","valuesObject":{"replicas":2}}}]},
				"status":{"sourceTypes":["Helm","Helm"]}}`,
			want: Application{Name: "api", Namespace: "argocd", Sources: []Source{
				{Index: 0, RepoURL: "https://git.example.com/apps.git", Path: "api", TargetRevision: "main", Type: "Helm",
					HelmValues: true, HelmParameters: []string{"image.tag", "replicas"}},
				// valuesObject already wins over values: writing into it
				// loses nothing.
				{Index: 1, RepoURL: "https://git.example.com/apps.git", Path: "web", TargetRevision: "main", Type: "Helm"},
			}},
			files: []string{"api/.argocd-source-api.yaml", "web/.argocd-source-api.yaml"},
		},
		{
			name:  "not yet compared",
			json:  `{"metadata":{"name":"new"},"spec":{"source":{"repoURL":"r","path":".","targetRevision":"HEAD"}}}`,
			want:  Application{Name: "new", Sources: []Source{{RepoURL: "r", Path: ".", TargetRevision: "HEAD"}}},
			files: []string{".argocd-source-new.yaml"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadApplication([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			for i, s := range got.Sources {
				if f := got.OverrideFile("argocd", s); f != tc.files[i] {
					t.Errorf("source %d: override file %q, want %q", i, f, tc.files[i])
				}
			}
		})
	}
}

func TestReadApplicationRefusesWhatIsNotOne(t *testing.T) {
	for in, want := range map[string]string{
		`{"kind":"ApplicationSet"}`: "is ApplicationSet, not an Application",
		`[]`:                        "cannot unmarshal",
	} {
		if _, err := ReadApplication([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", in, err, want)
		}
	}
}
