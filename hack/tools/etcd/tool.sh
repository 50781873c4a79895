# etcd for envtest (sourced by hack/tools.sh).
version=$(modversion go.etcd.io/etcd/server/v3)
bin etcd go.etcd.io/etcd/server/v3 --version
link=testenv
