# Argo CD's application controller and repo server, for the tests that prove
# Argo CD reads the override files image-toolkit commits (tests/argocd;
# sourced by hack/tools.sh). Not part of `make testenv` or `make demo`: it is
# a large build only those tests need.
#
# Argo CD ships one multi-call binary (its cmd/main.go picks the component by
# the name it is run as, or $ARGOCD_BINARY_NAME): tools.sh builds it once and
# hard-links the second name. From the same module come its CRDs
# (manifests/crds) and hack/git-verify-wrapper.sh, which the repo server runs
# on every checkout (Argo CD's image installs it on PATH; the module zip
# drops its executable bit, so pkg/testing/testargocd installs it with one).
version=$(modversion github.com/argoproj/argo-cd/v3)
p=github.com/argoproj/argo-cd/v3/common
ldflags="-X $p.version=${version#v} -X $p.gitTreeState=clean"
link=argocd
data github.com/argoproj/argo-cd/v3 manifests/crds hack/git-verify-wrapper.sh
bin argocd-application-controller github.com/argoproj/argo-cd/v3/cmd --help
bin argocd-repo-server github.com/argoproj/argo-cd/v3/cmd --help
