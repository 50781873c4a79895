# cosign, Sigstore's signing CLI, which the signature tests run to sign
# images in the test registry (keyed, in the legacy .sig tag format and as
# v3 bundles; sourced by hack/tools.sh). Its version comes from -ldflags, as
# cosign's release build sets it.
version=$(modversion github.com/sigstore/cosign/v3)
ldflags="-X sigs.k8s.io/release-utils/version.gitVersion=$version"
link=sign
bin cosign github.com/sigstore/cosign/v3/cmd/cosign version
