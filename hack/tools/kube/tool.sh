# kube-apiserver and kubectl for envtest (sourced by hack/tools.sh).
version=$(modversion k8s.io/kubernetes)
minor=$(echo "$version" | cut -d. -f2)
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
bin kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver --version
bin kubectl k8s.io/kubernetes/cmd/kubectl version --client
link=testenv
