# gitea, the forge tests/pullrequest opens pull requests on (sourced by
# hack/tools.sh). SQLite needs cgo and the two tags; without the bindata tag
# gitea reads its options/ and templates/ from its work path at run time, so
# they are copied beside the binary, and the tests link them into the work
# path. Its version comes from -ldflags, as gitea's Makefile sets it.
version=$(modversion code.gitea.io/gitea)
cgo=1
tags="sqlite sqlite_unlock_notify"
ldflags="-X main.Version=${version#v}"
link=gitea
data code.gitea.io/gitea options templates
bin gitea code.gitea.io/gitea --version
