# helm, to lint and render the charts (sourced by hack/tools.sh).
version=$(modversion helm.sh/helm/v3)
# helm lint and template check charts against the Kubernetes version baked in
# at build time: make it the one envtest runs.
k8s_minor=$(modversion k8s.io/kubernetes ../kube/go.mod | cut -d. -f2)
h=helm.sh/helm/v3
ldflags="-X $h/internal/version.version=$version \
  -X $h/pkg/lint/rules.k8sVersionMajor=1 -X $h/pkg/lint/rules.k8sVersionMinor=$k8s_minor \
  -X $h/pkg/chartutil.k8sVersionMajor=1 -X $h/pkg/chartutil.k8sVersionMinor=$k8s_minor"
bin helm helm.sh/helm/v3/cmd/helm version --short
