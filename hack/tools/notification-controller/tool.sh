# Flux's notification-controller and its CRDs, for the test in which dev's
# Flux pushes Kustomization health to a HealthWebhook (issue 47) (sourced by
# hack/tools.sh). Its own module, not flux-controllers': it brings the cloud
# SDKs of its providers, which the other two need not share. Not part of
# `make testenv` or `make demo`: `make flux-tools` builds it. It prints no
# version; --help answers and exits 0.
version=$(modversion github.com/fluxcd/notification-controller)
link=notification-controller
data github.com/fluxcd/notification-controller config/crd/bases=crds
bin notification-controller github.com/fluxcd/notification-controller --help
