# fleet — a Cluster API infrastructure provider for edge machines behind NAT.
#
# Every target has a "## help" line; `make help` lists them.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

GO            ?= go
BIN           := $(CURDIR)/bin
K8S_BIN       := $(BIN)/k8s
K8S_VERSION   := v1.36.3
# The upstream commands built from hack/tools/k8s into bin/k8s.
K8S_CMDS      := etcd kube-apiserver kubectl kubelet kubeadm kube-controller-manager kube-scheduler kube-proxy coredns
K8S_CMD_BINS  := $(addprefix $(K8S_BIN)/,$(K8S_CMDS))
# The previous minor, built from hack/tools/k8s-1.35 into bin/k8s-v1.35.4:
# what the in-place upgrade tests start real hosts on. etcd and pause are
# bin/k8s's (kubeadm only tags them differently).
K8S_PREV_VERSION  := v1.35.4
K8S_PREV_BIN      := $(BIN)/k8s-$(K8S_PREV_VERSION)
K8S_PREV_CMDS     := kube-apiserver kubectl kubelet kubeadm kube-controller-manager kube-scheduler kube-proxy
K8S_PREV_CMD_BINS := $(addprefix $(K8S_PREV_BIN)/,$(K8S_PREV_CMDS) coredns)
NODEIMAGE     := $(BIN)/nodeimage
HUBIMAGE      := $(BIN)/hubimage
# clusterctl is built from Cluster API's module at the version fleet
# implements the contract of (hack/tools/clusterctl/go.mod).
CLUSTERCTL_VERSION := $(shell awk '$$1 == "require" && $$2 == "sigs.k8s.io/cluster-api" { print $$3 }' hack/tools/clusterctl/go.mod)
CLUSTERCTL    := $(BIN)/clusterctl
CONTROLLER_GEN_VERSION := v0.21.0
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
# golangci-lint is pinned in hack/tools/golangci-lint/go.mod; its binary is
# kept in bin/ under that version, so a new pin builds a new one.
GOLANGCI_LINT_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/golangci/golangci-lint/v2" { print $$3 }' hack/tools/golangci-lint/go.mod)
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# Every module whose go.mod `make verify` keeps tidy.
GO_MODULES    := . $(patsubst %/go.mod,%,$(wildcard hack/tools/*/go.mod))
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -X github.com/edgefleet/fleet/internal/version.Version=$(VERSION)
TEST_FLAGS    ?=
export KUBEBUILDER_ASSETS := $(K8S_BIN)

K8S_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=36 \
	-X k8s.io/component-base/version.gitTreeState=clean
K8S_PREV_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_PREV_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=35 \
	-X k8s.io/component-base/version.gitTreeState=clean

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9\/.-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, CRDs and RBAC from the Go types and markers; bundle Cluster API's CRDs.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./pkg/contract/...
	$(CONTROLLER_GEN) crd paths=./pkg/contract/... output:crd:dir=manifests/crd
	$(CONTROLLER_GEN) rbac:roleName=fleet-hub-manager paths=./pkg/hub/... output:rbac:dir=manifests/rbac
	$(GO) run ./hack/capicrds -o pkg/hub/embedded/clusterapi/crds.yaml.gz -webhooks pkg/hub/embedded/clusterapi/webhooks.yaml.gz

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -s -w $$(git ls-files '*.go')

GENERATED := pkg/contract/v1alpha1/zz_generated.deepcopy.go manifests/crd manifests/rbac/role.yaml pkg/hub/embedded/clusterapi/crds.yaml.gz pkg/hub/embedded/clusterapi/webhooks.yaml.gz

.PHONY: verify
verify: $(CONTROLLER_GEN) $(GOLANGCI_LINT) ## Fail if generated files are stale, code is not gofmt'ed, go vet or golangci-lint complain, or a go.mod is not tidy.
	@rm -rf $(BIN)/.verify && mkdir -p $(BIN)/.verify && cp -r --parents $(GENERATED) $(BIN)/.verify/
	@$(MAKE) --no-print-directory generate >/dev/null
	@for f in $(GENERATED); do diff -r $(BIN)/.verify/$$f $$f >/dev/null || { echo "generated files are stale ($$f): run 'make generate' and commit the result"; exit 1; }; done
	@out=$$(gofmt -s -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt'ed (run 'make fmt'):"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd hack/tools/k8s && $(GO) vet ./...
	cd hack/tools/k8s-1.35 && $(GO) vet ./...
	$(GOLANGCI_LINT) run ./...
	@$(MAKE) --no-print-directory verify-tidy

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint with .golangci.yml over fleet's module.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify-tidy
verify-tidy: ## Fail if `go mod tidy` would change go.mod or go.sum of fleet or of a hack/tools module.
	@for m in $(GO_MODULES); do \
	  (cd $$m && $(GO) mod tidy -diff) || { echo "$$m/go.mod is not tidy: run 'cd $$m && go mod tidy' and commit the result"; exit 1; }; \
	done

##@ Build

.PHONY: build
build: ## Build fleet-hub, fleet-agent, kubectl-fleet and fleet-release into bin/.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/fleet-hub ./cmd/fleet-agent ./cmd/kubectl-fleet ./cmd/fleet-release

.PHONY: k8s
k8s: $(K8S_CMD_BINS) node-images ## Build kube-apiserver, etcd, kubectl, kubelet, kubeadm, controller manager, scheduler, kube-proxy and CoreDNS into bin/k8s, and their images (minutes the first time).

$(K8S_CMD_BINS): hack/tools/k8s/go.mod hack/tools/k8s/go.sum
	@mkdir -p $(K8S_BIN)
	@echo ">> building kube-apiserver $(K8S_VERSION), etcd, kubectl, kubelet, kubeadm, kube-controller-manager, kube-scheduler, kube-proxy and coredns from Go modules into $(K8S_BIN) (about 10-15 minutes on 2 cores the first time; ~2,900 packages)"
	@# -v names each package as it is compiled: count them, so a long first build shows progress; other lines are errors.
	@cd hack/tools/k8s && $(GO) build -v -ldflags "$(K8S_LDFLAGS)" -o $(K8S_BIN)/ $(addprefix ./cmd/,$(K8S_CMDS)) 2>&1 | \
	  awk '/^go: downloading/ { if (d++ % 25 == 0) print "   downloading modules (" d ")…"; fflush(); next } \
	       / / { print; fflush(); next } { if (++n % 200 == 0) print "   " n " packages compiled…"; fflush() }'
	@touch $(K8S_CMD_BINS)

.PHONY: node-images
node-images: $(K8S_CMD_BINS) $(K8S_BIN)/pause $(NODEIMAGE) ## Build every image kubeadm lists (apiserver, controller manager, scheduler, kube-proxy, CoreDNS, etcd, pause) into bin/k8s/images, for `ctr images import`.
	@echo ">> building the images kubeadm $(K8S_VERSION) lists into $(K8S_BIN)/images"
	@$(NODEIMAGE) kubeadm --kubeadm $(K8S_BIN)/kubeadm --bin-dir $(K8S_BIN) --out-dir $(K8S_BIN)/images

.PHONY: k8s-prev
k8s-prev: $(K8S_PREV_CMD_BINS) $(K8S_PREV_BIN)/etcd $(K8S_PREV_BIN)/pause $(NODEIMAGE) ## Build Kubernetes $(K8S_PREV_VERSION) (kubelet, kubeadm, control plane, CoreDNS) and its images into bin/k8s-v1.35.4, for the in-place upgrade tests.
	@echo ">> building the images kubeadm $(K8S_PREV_VERSION) lists into $(K8S_PREV_BIN)/images"
	@$(NODEIMAGE) kubeadm --kubeadm $(K8S_PREV_BIN)/kubeadm --bin-dir $(K8S_PREV_BIN) --out-dir $(K8S_PREV_BIN)/images

$(K8S_PREV_CMD_BINS): hack/tools/k8s-1.35/go.mod hack/tools/k8s-1.35/go.sum hack/tools/k8s-1.35/cmd/coredns/main.go
	@mkdir -p $(K8S_PREV_BIN)
	@echo ">> building Kubernetes $(K8S_PREV_VERSION) (kubelet, kubeadm, control plane) and CoreDNS from Go modules into $(K8S_PREV_BIN) (about 10 minutes on 2 cores the first time)"
	@cd hack/tools/k8s-1.35 && $(GO) build -v -ldflags "$(K8S_PREV_LDFLAGS)" -o $(K8S_PREV_BIN)/ $(addprefix k8s.io/kubernetes/cmd/,$(K8S_PREV_CMDS)) ./cmd/coredns 2>&1 | \
	  awk '/^go: downloading/ { if (d++ % 25 == 0) print "   downloading modules (" d ")…"; fflush(); next } \
	       / / { print; fflush(); next } { if (++n % 200 == 0) print "   " n " packages compiled…"; fflush() }'
	@touch $(K8S_PREV_CMD_BINS)

# The same etcd and pause binaries serve both versions' images.
$(K8S_PREV_BIN)/etcd $(K8S_PREV_BIN)/pause: $(K8S_PREV_BIN)/%: $(K8S_BIN)/%
	@mkdir -p $(K8S_PREV_BIN)
	cp -p $< $@

# pause is static so that its image needs no libc.
$(K8S_BIN)/pause: hack/tools/k8s/cmd/pause/main.go
	@mkdir -p $(K8S_BIN)
	cd hack/tools/k8s && CGO_ENABLED=0 $(GO) build -o $@ ./cmd/pause

$(NODEIMAGE): $(filter-out %_test.go,$(wildcard hack/tools/k8s/cmd/nodeimage/*.go hack/tools/k8s/ocilayout/*.go)) hack/tools/k8s/go.mod hack/tools/k8s/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/k8s && $(GO) build -o $@ ./cmd/nodeimage

$(HUBIMAGE): $(filter-out %_test.go,$(wildcard hack/tools/k8s/cmd/hubimage/*.go hack/tools/k8s/ocilayout/*.go)) hack/tools/k8s/go.mod hack/tools/k8s/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/k8s && $(GO) build -o $@ ./cmd/hubimage

.PHONY: clusterctl
clusterctl: $(CLUSTERCTL) ## Build Cluster API's clusterctl (the version hack/tools/clusterctl/go.mod pins, v1.14.2) into bin/, for the clusterctl tests and docs/INSTALL.md.

$(CLUSTERCTL): hack/tools/clusterctl/go.mod hack/tools/clusterctl/go.sum
	@mkdir -p $(BIN)
	@echo ">> building clusterctl $(CLUSTERCTL_VERSION) from its Go module into $(BIN) (about a minute the first time)"
	cd hack/tools/clusterctl && $(GO) build -ldflags "-X sigs.k8s.io/cluster-api/version.gitVersion=$(CLUSTERCTL_VERSION) \
	  -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=14 -X sigs.k8s.io/cluster-api/version.gitTreeState=clean" \
	  -o $@ sigs.k8s.io/cluster-api/cmd/clusterctl

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/controller-gen $(CONTROLLER_GEN)

$(GOLANGCI_LINT):
	@mkdir -p $(BIN)
	@echo ">> building golangci-lint $(GOLANGCI_LINT_VERSION) from its Go module into $(BIN) (several minutes on 2 cores the first time)"
	cd hack/tools/golangci-lint && $(GO) build -o $(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

KREW_VERSION   ?= v0.1.0
KREW_DIST      ?= $(CURDIR)/dist/krew
KREW_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64

.PHONY: krew
krew: ## Build kubectl-fleet archives (KREW_PLATFORMS) and render $(KREW_DIST)/fleet.yaml from krew.yaml.
	@rm -rf $(KREW_DIST) && mkdir -p $(KREW_DIST)
	@for p in $(KREW_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; ext=; [ "$$os" = windows ] && ext=.exe; \
	  d=$(KREW_DIST)/build/$$os-$$arch; mkdir -p $$d; \
	  echo ">> kubectl-fleet $$os/$$arch"; \
	  GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X github.com/edgefleet/fleet/internal/version.Version=$(KREW_VERSION)" -o $$d/kubectl-fleet$$ext ./cmd/kubectl-fleet || exit 1; \
	  cp LICENSE hack/kubectl_complete-fleet $$d/; \
	  tar -C $$d -czf $(KREW_DIST)/kubectl-fleet_$${os}_$${arch}.tar.gz . || exit 1; \
	done
	$(GO) run hack/krew/render.go -version $(KREW_VERSION) -dir $(KREW_DIST) > $(KREW_DIST)/fleet.yaml
	@echo ">> $(KREW_DIST)/fleet.yaml"

# The hub's image: IMAGE_REPO:IMAGE_TAG, one image per IMAGE_PLATFORMS.
IMAGE_REPO      ?= ghcr.io/edgefleet/fleet-hub
IMAGE_TAG       ?= $(VERSION)
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_DIST      ?= $(CURDIR)/dist
IMAGE_ARCHIVE   := $(IMAGE_DIST)/fleet-hub.oci.tar

.PHONY: image
image: $(HUBIMAGE) ## Build fleet-hub's OCI image for IMAGE_PLATFORMS (static binaries, user 65532, no shell) into dist/fleet-hub.oci.tar; prints its digest.
	@mkdir -p $(IMAGE_DIST)/image
	@bins=; for p in $(IMAGE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  echo ">> fleet-hub $$os/$$arch"; \
	  GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(IMAGE_DIST)/image/$$os-$$arch/fleet-hub ./cmd/fleet-hub || exit 1; \
	  bins="$$bins --binary $$p=$(IMAGE_DIST)/image/$$os-$$arch/fleet-hub"; \
	done; \
	$(HUBIMAGE) build --name $(IMAGE_REPO):$(IMAGE_TAG) --version $(VERSION) --out $(IMAGE_ARCHIVE) $$bins

.PHONY: image-push
image-push: $(HUBIMAGE) ## Push dist/fleet-hub.oci.tar (from `make image`) to REGISTRY/fleet-hub:IMAGE_TAG with docker login's credentials.
	@test -n "$(REGISTRY)" || { echo "REGISTRY is required, e.g. make image-push REGISTRY=ghcr.io/edgefleet"; exit 1; }
	$(HUBIMAGE) push --archive $(IMAGE_ARCHIVE) --to $(REGISTRY)/fleet-hub:$(IMAGE_TAG)

.PHONY: release-manifests
release-manifests: ## Render clusterctl's release files into dist/: infrastructure-components.yaml (image IMAGE_REPO:IMAGE_TAG, pinned to IMAGE_DIGEST if set), metadata.yaml, cluster-template*.yaml.
	$(GO) run ./hack/release --out $(IMAGE_DIST) --image $(IMAGE_REPO) --tag $(IMAGE_TAG) $(if $(IMAGE_DIGEST),--digest $(IMAGE_DIGEST))

PKG_VERSION ?= 0.1.0
PKG_ARCHS   ?= amd64 arm64
PKG_DIST    ?= $(CURDIR)/dist/packages
NFPM        := $(BIN)/nfpm

$(NFPM): hack/tools/nfpm/go.mod
	cd hack/tools/nfpm && GOBIN=$(BIN) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm

.PHONY: packages
packages: $(NFPM) ## Build fleet-agent .deb and .rpm packages for PKG_ARCHS (amd64 arm64) into $(PKG_DIST).
	@rm -rf $(PKG_DIST) && mkdir -p $(PKG_DIST)
	@for arch in $(PKG_ARCHS); do \
	  echo ">> fleet-agent linux/$$arch"; \
	  mkdir -p $(PKG_DIST)/build/$$arch; \
	  GOOS=linux GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X github.com/edgefleet/fleet/internal/version.Version=v$(PKG_VERSION)" -o $(PKG_DIST)/build/$$arch/fleet-agent ./cmd/fleet-agent || exit 1; \
	  sed -e "s|\$${ARCH}|$$arch|g" -e "s|\$${VERSION}|$(PKG_VERSION)|g" -e "s|\$${BIN}|$(PKG_DIST)/build/$$arch/fleet-agent|g" \
	    packaging/nfpm.yaml > $(PKG_DIST)/build/$$arch/nfpm.yaml; \
	  for fmt in deb rpm; do \
	    $(NFPM) package --config $(PKG_DIST)/build/$$arch/nfpm.yaml --packager $$fmt --target $(PKG_DIST)/ || exit 1; \
	  done; \
	done
	@ls -1 $(PKG_DIST)/*.deb $(PKG_DIST)/*.rpm

# The edge OS image (packaging/edge-image, docs/EDGE-IMAGE.md): Debian
# packages pinned in packages.lock, fleet-agent's .deb, the Kubernetes
# versions of EDGE_IMAGE_K8S (the first runs, the rest are staged), every
# timestamp at EDGE_IMAGE_EPOCH (the last commit of the image's definition).
EDGE_IMAGE_OUT   ?= $(CURDIR)/dist/edge-image
EDGE_IMAGE_K8S   ?= $(K8S_BIN)
EDGE_IMAGE_EPOCH ?= $(shell t=$$(git log -1 --format=%ct -- packaging/edge-image 2>/dev/null); echo $${t:-1764806400})
EDGE_IMAGE_UPDATE_LOCK ?=
EDGE_IMAGE_ROOT_FREE_MB ?= 2048

.PHONY: edge-image
edge-image: k8s $(NFPM) ## Build the edge OS image into $(EDGE_IMAGE_OUT): a root file system archive and a raw GPT disk image with fleet-agent, containerd, the kubelet and kubeadm (needs root; EDGE_IMAGE_UPDATE_LOCK=1 re-resolves packaging/edge-image/packages.txt).
	@$(MAKE) --no-print-directory packages PKG_ARCHS=amd64 PKG_DIST=$(EDGE_IMAGE_OUT)/packages >/dev/null
	OUT_DIR=$(EDGE_IMAGE_OUT) AGENT_DEB=$$(ls $(EDGE_IMAGE_OUT)/packages/*.deb) K8S_DIRS="$(EDGE_IMAGE_K8S)" \
	  SOURCE_DATE_EPOCH=$(EDGE_IMAGE_EPOCH) UPDATE_LOCK=$(EDGE_IMAGE_UPDATE_LOCK) ROOT_FREE_MB=$(EDGE_IMAGE_ROOT_FREE_MB) \
	  packaging/edge-image/build.sh

# The image the real-node tests and the demo boot their hosts from: built
# like edge-image, kept in bin/edge-image and rebuilt only when an input
# changed (packaging/edge-image/test-image.sh).
TEST_IMAGE := $(BIN)/edge-image

.PHONY: test-image
test-image: k8s $(NFPM) ## Build the edge image the real-node tests and the demo boot into bin/edge-image, or keep it when no input changed (needs root; says why and builds nothing where it cannot).
	@OUT_DIR=$(TEST_IMAGE) K8S_DIRS="$(K8S_BIN)" SOURCE_DATE_EPOCH=$(EDGE_IMAGE_EPOCH) MAKE="$(MAKE)" packaging/edge-image/test-image.sh

.PHONY: demo
demo: k8s ## Run fleet locally: the embedded hub, 3 real edge hosts (or simulated ones where they cannot run) and a cluster on them (needs root; installs the Debian packages real hosts lack unless DEMO_FLAGS=--no-install; DEMO_FLAGS=--nodes=simulated forces the simulator).
	@echo ">> building fleet-hub, fleet-agent, kubectl-fleet, the node simulator, the demo and its workload into bin/ (about 3 minutes the first time)"
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/fleet-hub ./cmd/fleet-agent ./cmd/kubectl-fleet ./cmd/fleet-release
	$(GO) build -o $(BIN)/fleet-nodesim ./test/nodesim
	$(GO) build -o $(BIN)/fleet-demo ./hack/demo
	CGO_ENABLED=0 $(GO) build -o $(BIN)/fleet-echoserver ./test/echoserver
	@# Set-up first: the kube-proxy image packs iptables and nft, and the
	@# edge image is built with mmdebstrap, from the Debian packages it installs.
	$(BIN)/fleet-demo --set-up-only $(DEMO_FLAGS)
	@$(MAKE) --no-print-directory node-images
	@case "$(DEMO_FLAGS)" in *--nodes=simulated*) ;; *) $(MAKE) --no-print-directory test-image ;; esac
	$(BIN)/fleet-demo $(DEMO_FLAGS)

##@ Test

.PHONY: test
test: k8s k8s-prev $(CLUSTERCTL) test-image ## Run every test against a real kube-apiserver, etcd and the real Cluster API reconcilers (and the real clusterctl).
	@# test/e2e is the long pole (real nodes): it goes first, the other packages share the second core beside it.
	@pkgs=$$($(GO) list ./... | grep -v '/test/e2e$$') && [ -n "$$pkgs" ] || { echo "go list ./... found no packages"; exit 1; }
	$(GO) test -timeout 60m $(TEST_FLAGS) ./test/e2e/ $$($(GO) list ./... | grep -v '/test/e2e$$')
	cd hack/tools/k8s && $(GO) test -timeout 10m ./cmd/nodeimage/... ./cmd/pause/... ./cmd/hubimage/... ./ocilayout/...

.PHONY: test-race
test-race: k8s k8s-prev ## Run every test with the race detector.
	$(GO) test -race -timeout 30m $(TEST_FLAGS) ./...

REL_SEEDS ?= 1 2 3
REL_HOSTS ?= 0
REL_RUN ?= .

.PHONY: reliability
reliability: k8s ## Run the fault suite (test/faults, or the tests REL_RUN matches) once per seed of REL_SEEDS (default "1 2 3"; TestHubKills and TestReplicaFailover with REL_HOSTS hosts, default their short forms, the long form 30), keep each run's record in docs/reliability/ and write docs/RELIABILITY.md's figures; fails if a run failed, after the report.
	@failed=0; for s in $(REL_SEEDS); do \
		$(GO) test ./test/faults -run '$(REL_RUN)' -count=1 -timeout 60m -args -faults.seed=$$s -faults.hosts=$(REL_HOSTS) -faults.results=$(CURDIR)/docs/reliability || failed=1; \
	done; \
	$(GO) run ./test/faults/report && exit $$failed

SOAK_AGENTS ?= 10000
SOAK_DURATION ?= 1h

.PHONY: soak
soak: k8s ## Soak: SOAK_AGENTS simulated agents (default 10000) on two hub replicas for SOAK_DURATION (default 1h), 1 % restarted every minute, a replica restarted every 10 minutes; heap and goroutines must stay flat, no session may leak, no connected host be marked ContactLost; writes docs/RELIABILITY.md's soak figures.
	$(GO) test ./bench -run '^$$' -bench 'Soak' -benchtime 1x -count 1 -timeout 0 -args -soak-agents=$(SOAK_AGENTS) -soak-duration=$(SOAK_DURATION) -soak-results=$(CURDIR)/docs/reliability
	$(GO) run ./test/faults/report

BENCH_AGENTS ?= 1000
BENCH_IDLE ?= 10m
BENCH_MACHINES ?= 500
BENCH_CLUSTERS ?= 500
BENCH_CLUSTERS_IDLE ?= 10m

.PHONY: bench
bench: k8s k8s-prev test-image ## Run every benchmark against a real API server and write docs/PERFORMANCE.md's tables and plots (defaults BENCH_AGENTS=1000 BENCH_IDLE=10m BENCH_MACHINES=500 BENCH_CLUSTERS=500 BENCH_CLUSTERS_IDLE=10m; the documented runs: BENCH_AGENTS=1000,2000,5000,10000).
	$(GO) test ./bench -run '^$$' -bench 'DescribeCluster' -benchtime 10x -count 1
	$(GO) test ./bench -run '^$$' -bench 'EdgeReach' -benchtime 2s -count 1
	$(GO) test ./bench -run '^$$' -bench 'AgentFootprint' -benchtime 1x -count 1 -timeout 20m
	$(GO) test ./bench -run '^$$' -bench 'HubScale' -benchtime 1x -count 1 -timeout 300m -args -agents=$(BENCH_AGENTS) -idle=$(BENCH_IDLE)
	$(GO) test ./bench -run '^$$' -bench 'Provisioning' -benchtime 1x -count 1 -timeout 60m -args -machines=$(BENCH_MACHINES)
	$(GO) test ./bench -run '^$$' -bench 'RealNodes' -benchtime 1x -count 1 -timeout 30m
	$(GO) test ./bench -run '^$$' -bench 'InPlaceUpgrade' -benchtime 1x -count 1 -timeout 30m
	$(GO) test ./bench -run '^$$' -bench 'SimulatedUpgrade' -benchtime 1x -count 1 -timeout 60m -args -upgrade-hosts=100
	$(GO) test ./test/edgeimage -run '^$$' -bench 'EdgeImageBuild' -benchtime 1x -count 1 -timeout 30m
	$(GO) test ./bench -run '^$$' -bench 'HubReplicas' -benchtime 1x -count 1 -timeout 60m -args -replica-agents=1000
	$(GO) test ./bench -run '^$$' -bench 'AgentRollout' -benchtime 1x -count 1 -timeout 60m -args -rollout-agents=1000
	$(GO) test ./bench -run '^$$' -bench 'ManyClusters' -benchtime 1x -count 1 -timeout 120m -args -clusters=$(BENCH_CLUSTERS) -clusters-idle=$(BENCH_CLUSTERS_IDLE)
	$(GO) run ./bench/report

.PHONY: bench-clusters bench-upgrade bench-rollout
bench-rollout: k8s ## Run only BenchmarkAgentRollout: 1,000 agents to a new fleet-agent release through one hub in waves of 10 %; updates docs/PERFORMANCE.md.
	$(GO) test ./bench -run '^$$' -bench 'AgentRollout' -benchtime 1x -count 1 -timeout 60m -args -rollout-agents=1000
	$(GO) run ./bench/report

bench-upgrade: k8s k8s-prev test-image ## Run only the upgrade benchmarks: a one-host site from v1.35.4 to v1.36.3 in place (its steps and the API server's unavailability), and 100 simulated hosts of one site through the same order; updates docs/PERFORMANCE.md.
	$(GO) test ./bench -run '^$$' -bench 'InPlaceUpgrade' -benchtime 1x -count 1 -timeout 30m
	$(GO) test ./bench -run '^$$' -bench 'SimulatedUpgrade' -benchtime 1x -count 1 -timeout 60m -args -upgrade-hosts=100
	$(GO) run ./bench/report

bench-clusters: k8s ## Run only BenchmarkManyClusters: BENCH_CLUSTERS one-host ClusterClass clusters to Available, then at rest for BENCH_CLUSTERS_IDLE; updates docs/PERFORMANCE.md.
	$(GO) test ./bench -run '^$$' -bench 'ManyClusters' -benchtime 1x -count 1 -timeout 120m -args -clusters=$(BENCH_CLUSTERS) -clusters-idle=$(BENCH_CLUSTERS_IDLE)
	$(GO) run ./bench/report

FUZZTIME ?= 10m

.PHONY: fuzz
fuzz: ## Fuzz the wire decoder and the cloud-config parser, FUZZTIME each (default 10m).
	$(GO) test ./pkg/contract/wire -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/agent/cloudconfig -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) -fuzzminimizetime 5s
