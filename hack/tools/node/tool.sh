# The node's Kubernetes parts for `make cluster` (issue 19): kubelet, the
# scheduler, the controller manager and kube-proxy, from the same release as
# kube-apiserver (sourced by hack/tools.sh). Not part of `make testenv`: the
# charts' real-node suite builds them.
version=$(modversion k8s.io/kubernetes)
minor=$(echo "$version" | cut -d. -f2)
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
bin kubelet k8s.io/kubernetes/cmd/kubelet --version
bin kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler --version
bin kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager --version
bin kube-proxy k8s.io/kubernetes/cmd/kube-proxy --version
link=node
