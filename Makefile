# image-toolkit. `make demo` and `make test` work on a fresh machine: every
# target depends on what it needs, and slow-to-build tools are cached under
# $(CACHE), outside the clone, keyed by version.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

ROOT := $(CURDIR)
BIN := $(ROOT)/bin
CACHE ?= $(HOME)/.cache/image-toolkit
export IMAGE_TOOLKIT_CACHE := $(CACHE)

# Tools built from the Go modules pinned in hack/tools/<tool>/{go.mod,go.sum};
# bump one with hack/tools/pin.sh.
CONTROLLER_GEN := $(BIN)/controller-gen
TESTENV := $(BIN)/testenv
HELM := $(BIN)/helm

MODULES := pkg pkg/apis image-reflector-controller image-automation-controller update-job-controller tk-image tests examples/embed-engine
CHARTS := image-reflector-controller image-automation-controller update-job-controller
# Binaries that link libgit2 through git2go (tk-image for update --repository,
# the write-back engine's front end); the other two import no C, so the Go
# linker makes them static binaries though cgo is on.
CGO_BINARIES := update-job-controller tk-image
STATIC_BINARIES := image-reflector-controller image-automation-controller
# One set of flags for every binary make builds: with netgo and osusergo the
# net and os/user packages are the pure-Go ones a CGO_ENABLED=0 build has
# (names resolve through /etc/hosts and /etc/resolv.conf, as kubectl's do),
# so the four binaries, the demo and the image writer share one compile of
# their dependencies instead of one per cgo setting: minutes on a new machine.
BUILDFLAGS := -trimpath -tags=netgo,osusergo

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X toolkit.dev/image-toolkit/pkg/version.Version=$(VERSION)

export GOTOOLCHAIN := local
export GOFLAGS := -buildvcs=false
export KUBEBUILDER_ASSETS := $(TESTENV)
# `go test ./...` starts several control planes at once on two cores.
export KUBEBUILDER_CONTROLPLANE_START_TIMEOUT := 60s
export KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT := 60s

.PHONY: all build test test-integrations unit lint generate verify-generate testenv node-tools argocd-tools flux-tools sign-tools browser-tools tools deps build-deps demo bench faults clean help images cluster plugin-archives

all: build

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

deps: build-deps ## Install the system packages the tests need besides the build's (git servers, chromium, containerd, prometheus, ...: hack/deps.sh says which and why).
	@hack/deps.sh

build-deps: ## Install only the system packages the build needs (libgit2 1.5, pkg-config, git): what make build and make demo install.
	@hack/deps.sh build

tools: ## Build controller-gen from its pinned module into bin/ (cached).
	@hack/tools.sh controller-gen

testenv: ## Build kube-apiserver, kubectl and etcd into bin/testenv, helm and kustomize into bin/, gitea into bin/gitea (cached).
	@hack/tools.sh kube etcd helm kustomize gitea

node-tools: ## Build kubelet, kube-scheduler, kube-controller-manager and kube-proxy into bin/node (cached), for the real node of tests/node and make cluster.
	@hack/tools.sh node

argocd-tools: ## Build Argo CD's application controller and repo server, with its CRDs, into bin/argocd (cached), for tests/argocd.
	@hack/tools.sh argocd

flux-tools: ## Build Flux's source-controller and kustomize-controller, with their CRDs, into bin/flux-controllers, its notification-controller into bin/notification-controller, and the Flux CLI into bin/flux (cached), for tests/node's Flux health test, the pushed-health test and the Flux plugin test of tests/dashboard.
	@hack/tools.sh flux-controllers notification-controller flux

sign-tools: ## Build the cosign and notation CLIs into bin/sign (cached), which the signature tests sign images with.
	@hack/tools.sh cosign notation

browser-tools: ## Install axe-core from npm into bin/axe (pinned by tests/dashboard/axe/package-lock.json), for tests/dashboard; chromium comes with make deps.
	@mkdir -p $(BIN)/axe
	@if ! cmp -s tests/dashboard/axe/package-lock.json $(BIN)/axe/package-lock.json || [ ! -f $(BIN)/axe/node_modules/axe-core/axe.min.js ]; then \
		cp tests/dashboard/axe/package.json tests/dashboard/axe/package-lock.json $(BIN)/axe/ && \
		(cd $(BIN)/axe && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error); fi

generate: tools build-deps ## Regenerate deepcopy, CRDs and RBAC.
	@hack/generate.sh

verify-generate: tools build-deps ## Fail when generated files are stale.
	@hack/generate.sh --verify

build: build-deps ## Build the four binaries into bin/.
	@mkdir -p $(BIN)
	@# One go build: while one binary links, the next compiles.
	@CGO_ENABLED=1 go build $(BUILDFLAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/ $(addprefix ./,$(STATIC_BINARIES) $(CGO_BINARIES))
	@echo "built: $(addprefix bin/,$(STATIC_BINARIES) $(CGO_BINARIES))"

images: build ## Write an OCI image tarball per binary, and image-update (tk-image update --krm), to bin/images, without a container engine.
	@SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) go run $(BUILDFLAGS) ./tests/cmd/images \
		--bin $(BIN) --out $(BIN)/images --version $(VERSION) --revision "$$(git rev-parse HEAD 2>/dev/null || true)"

lint: deps testenv ## gofmt, go vet and helm lint.
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@# -race: vet compiles the packages it checks as unit's go test -race
	@# does, so the tests reuse that compile instead of making their own.
	@for m in $(MODULES); do (cd $$m && go vet -race ./...); done
	@# pkg, the reflector and the CLI must build without cgo (Dockerfiles and
	@# plugin archives build so); -trimpath, as tests/readme's static
	@# tk-image is built, shares this compile with it.
	@for m in pkg image-reflector-controller tk-image; do \
		(cd $$m && CGO_ENABLED=0 go build -trimpath ./...); done
	@for c in $(CHARTS); do $(HELM) lint --strict --quiet charts/$$c; done

unit: deps testenv node-tools browser-tools build images ## Run every module's tests (unit and envtest) with -race; the tests of make test-integrations skip.
	@rc=0; IMAGE_TOOLKIT_BIN=$(BIN) IMAGE_TOOLKIT_REQUIRE_TOOLS="browser-tools" go test -race -count=1 $(addsuffix /...,$(addprefix ./,$(MODULES))) 2>&1 \
		| tee $(BIN)/unit.log || rc=$$?; \
	echo "packages: $$(grep -c '^ok' $(BIN)/unit.log) passed, $$(grep -c '^FAIL\s' $(BIN)/unit.log) failed"; \
	exit $$rc

test: verify-generate lint build unit ## lint, stale-generation check and all tests.

demo: build ## The whole chain locally: registry, git server, control plane, controllers; a tag becomes a commit (DEMO_FLAGS=--pull-request: a pull request on Gitea).
	@# Only what the demo runs: the control plane, and Gitea for --pull-request.
	@hack/tools.sh kube etcd $(if $(findstring --pull-request,$(DEMO_FLAGS)),gitea)
	@go run $(BUILDFLAGS) ./tests/cmd/demo --bin $(BIN) $(DEMO_FLAGS)

cluster: deps testenv node-tools images ## A single-node cluster from real parts (tests/internal/cluster) with the make images images imported, until Ctrl-C; prints its kubeconfig (CLUSTER_FLAGS=--dir DIR keeps its files and logs).
	@# Built, not go run: Ctrl-C reaches the program, which stops the cluster and exits 0.
	@go build -o $(BIN)/cluster ./tests/cmd/cluster && exec $(BIN)/cluster --root $(ROOT) $(CLUSTER_FLAGS)

test-integrations: deps testenv node-tools browser-tools argocd-tools flux-tools sign-tools build images ## The tests that need the heavy third-party builds (Argo CD, Flux, cosign, notation), which make test skips: minutes each to build on a new machine.
	@IMAGE_TOOLKIT_BIN=$(BIN) IMAGE_TOOLKIT_REQUIRE_TOOLS="browser-tools argocd-tools flux-tools sign-tools" go test -race -count=1 \
		./tests/argocd/ ./pkg/testing/testargocd/ ./pkg/testing/testflux/ ./tests/dashboard/ ./pkg/signature/ && \
		IMAGE_TOOLKIT_BIN=$(BIN) IMAGE_TOOLKIT_REQUIRE_TOOLS="browser-tools argocd-tools flux-tools" go test -race -count=1 -run Flux ./tests/node/

plugin-archives: ## tk-image as a Flux CLI plugin: an archive per platform, checksums.txt and the catalog manifest tk-image.yaml in bin/plugin (PLUGIN_BASE_URL=URL: where the release's archives will be downloaded from; nothing is uploaded).
	@[ -n "$(PLUGIN_BASE_URL)" ] || { echo "PLUGIN_BASE_URL must say where the archives will be served, e.g. make plugin-archives PLUGIN_BASE_URL=https://example.com/releases/v1.2.3" >&2; exit 2; }
	@SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) tk-image/plugin/archives.sh $(VERSION) $(PLUGIN_BASE_URL) $(BIN)/plugin

bench: deps testenv build ## Run the benchmarks (tests/bench runs the binaries at scale).
	@go test -run '^$$' -bench . -benchmem -timeout 8h $(addsuffix /...,$(addprefix ./,$(MODULES)))

faults: deps testenv build ## The fault suite's long run (IMAGE_TOOLKIT_FAULTS=long): kills, a damaged tag store, registry and git server faults, API server restarts, full disks, races, a 30-minute soak, fuzzing, secrets and RBAC checks, many runs with random timing; its short run is part of make test.
	@rc=0; IMAGE_TOOLKIT_FAULTS=long IMAGE_TOOLKIT_BIN=$(BIN) go test -count=1 -timeout 120m -v ./tests/faults/ > $(BIN)/faults.log 2>&1 || rc=$$?; \
	grep -E '^(--- |ok|FAIL)|FIGURES' $(BIN)/faults.log; echo "log: bin/faults.log"; exit $$rc

clean: ## Remove bin/ (the tool cache in $(CACHE) stays).
	rm -rf $(BIN)
