# notation, the Notary Project's signing CLI, which the signature tests run
# to sign images in the test registry with a test CA (sourced by
# hack/tools.sh). Its version is in its source; -ldflags clears the
# "unreleased" build metadata as notation's release build does.
version=$(modversion github.com/notaryproject/notation)
ldflags="-X github.com/notaryproject/notation/internal/version.BuildMetadata="
link=sign
bin notation github.com/notaryproject/notation/cmd/notation version
