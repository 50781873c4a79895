package argocd

import (
	"reflect"
	"testing"
)

// The targetRevision of an Application's chart sources is found by the
// Application's name and namespace (a manifest without one matches any),
// in a file of several documents; a git source, another Application, a
// chart of another name when one is named, and other kinds are not.
func TestChartRevisionsFindTheApplicationsChartSources(t *testing.T) {
	const file = `apiVersion: v1
kind: ConfigMap
metadata:
  name: podinfo
data:
  chart: podinfo
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: podinfo
  namespace: argocd
spec:
  source:
    repoURL: https://stefanprodan.github.io/podinfo
    chart: podinfo
    targetRevision: 6.5.0
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: shop
spec:
  sources:
  - repoURL: https://git.example.com/values.git
    targetRevision: main
    ref: values
  - repoURL: ghcr.io/org/charts
    chart: shop
    targetRevision: "1.2.0"
  - repoURL: ghcr.io/org/charts
    chart: redis
    targetRevision: 18.0.0
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: podinfo
  namespace: staging
spec:
  source:
    repoURL: https://stefanprodan.github.io/podinfo
    chart: podinfo
    targetRevision: 6.4.0
`
	for _, tc := range []struct {
		ns, name, chart string
		want            []Position
	}{
		{"argocd", "podinfo", "", []Position{{17, 21}}},
		{"staging", "podinfo", "podinfo", []Position{{44, 21}}},
		{"team", "shop", "", []Position{{30, 21}, {33, 21}}},
		{"team", "shop", "redis", []Position{{33, 21}}},
		{"argocd", "shop", "shop", []Position{{30, 21}}},
		{"argocd", "nothing", "", nil},
	} {
		got, err := ChartRevisions([]byte(file), tc.ns, tc.name, tc.chart)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s/%s chart %q: %v, want %v", tc.ns, tc.name, tc.chart, got, tc.want)
		}
	}
	if _, err := ChartRevisions([]byte("apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec:\n  source: {chart: a}\n"), "argocd", "a", ""); err == nil {
		t.Error("a chart source without targetRevision was accepted")
	}
}
