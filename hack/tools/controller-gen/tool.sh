# controller-gen for deepcopy, CRDs and RBAC (sourced by hack/tools.sh).
version=$(modversion sigs.k8s.io/controller-tools)
bin controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen --version
