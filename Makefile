# Sluice. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
HELM ?= $(LOCALBIN)/helm
HELM_VERSION ?= v3.22.0

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD, RBAC and webhook manifests from markers, the Grafana dashboard, and the chart's copies.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./..." output:crd:artifacts:config=config/crd/bases
	go run ./hack/dashboard config/grafana/sluice.json
	hack/sync-chart.sh

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## go fmt (and gofmt of hack/images and hack/realnode/coredns, modules of their own).
	go fmt ./...
	gofmt -l -w hack/images hack/realnode/coredns

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

GENERATED := api/v1alpha1/zz_generated.deepcopy.go config/crd/bases config/rbac/role.yaml config/webhook/manifests.yaml config/grafana/sluice.json dist/chart/templates/crd dist/chart/files

.PHONY: verify
verify: controller-gen ## Fail when generated files or go.mod are stale (and regenerate them).
	@before=$$(mktemp -d); for f in $(GENERATED); do mkdir -p $$before/$$(dirname $$f); [ ! -e $$f ] || cp -r $$f $$before/$$f; done; \
	$(MAKE) -s manifests generate >/dev/null; stale=0; \
	for f in $(GENERATED); do diff -r $$before/$$f $$f >/dev/null 2>&1 || { echo "stale: $$f (regenerated now; commit it)"; stale=1; }; done; \
	rm -rf $$before; \
	if ! go mod tidy -diff >/dev/null; then echo "stale: go.mod/go.sum (run go mod tidy)"; stale=1; fi; \
	[ $$stale = 0 ] || { echo "Generated files were stale: run 'make manifests generate' and 'go mod tidy', then commit."; exit 1; }

.PHONY: redis
redis: ## Install redis-server via apt when missing.
	@hack/ensure-redis.sh

.PHONY: prometheus
prometheus: ## Install prometheus and promtool (Debian's prometheus) via apt when missing.
	@hack/ensure-prometheus.sh

.PHONY: envtest
envtest: ## Provide envtest binaries (kube-apiserver, etcd) and print their directory.
	@hack/envtest-assets.sh

# The test tiers. `make test` is what a developer runs before each commit: generated files, lint,
# unit tests, envtest and single-process integration against a real redis-server, under -race.
# `make test-faults` runs the tests named TestFault*: fleets of clients, Sentinel and Cluster
# failovers, chaos through the sidecar binary and long black-box runs, without -race (the
# fleets are large, and the race detector's cost would be the machine's, not the product's).
# Neither asserts a wall-clock time; each waits for the events it checks.
FAULT_TESTS := ^TestFault
TEST_TIMEOUT ?= 20m

.PHONY: test
test: verify fmt vet lint redis prometheus helm-lint ## Run the checks and every test but the fault tier, against a real API server (envtest) and real redis-server.
	HELM=$(HELM) KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go test -race -count=1 -timeout $(TEST_TIMEOUT) -skip '$(FAULT_TESTS)' ./... -coverprofile cover.out

.PHONY: test-faults
test-faults: redis ## Run the fault tier: fleets, Sentinel and Cluster failovers, chaos and long black-box runs (TestFault*).
	go test -count=1 -timeout $(TEST_TIMEOUT) -run '$(FAULT_TESTS)' ./...

.PHONY: test-under-load
test-under-load: ## Run make test 5 times and make test-faults 3 times beside a CPU-bound load on one core, reporting each failing test (hack/under-load.sh).
	hack/under-load.sh -n 5 test
	hack/under-load.sh -n 3 test-faults

##@ Demo

DEMO_ARGS ?=
.PHONY: demo
demo: redis ## Run the whole system on loopback and show it working (DEMO_ARGS=--once to stop after the tour).
	go run ./hack/demo $(DEMO_ARGS)

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the binaries (manager, sluicectl, sidecar) into ./bin.
	go build -o $(LOCALBIN)/manager ./cmd/manager
	go build -o $(LOCALBIN)/sluicectl ./cmd/sluicectl
	go build -o $(LOCALBIN)/sluice-sidecar ./sidecar

.PHONY: run
run: manifests generate fmt vet ## Run the controller (without the webhook) against the cluster in ~/.kube/config.
	go run ./cmd/manager --webhook=false

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)-$(CONTROLLER_TOOLS_VERSION) ## Install controller-gen into ./bin.
$(CONTROLLER_GEN)-$(CONTROLLER_TOOLS_VERSION): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	touch $@

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)-$(GOLANGCI_LINT_VERSION) ## Install golangci-lint into ./bin.
$(GOLANGCI_LINT)-$(GOLANGCI_LINT_VERSION): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	touch $@

# helm's release builds stamp the Kubernetes version helm template and lint assume (that of
# its client-go); go install does not, and they would assume 1.20, older than the chart's
# kubeVersion.
HELM_K8S_MINOR ?= 37
.PHONY: helm
helm: $(HELM)-$(HELM_VERSION)-k8s1.$(HELM_K8S_MINOR) ## Install helm into ./bin.
$(HELM)-$(HELM_VERSION)-k8s1.$(HELM_K8S_MINOR): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install -ldflags "$(foreach p,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(HELM_K8S_MINOR))" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	touch $@

.PHONY: helm-lint
helm-lint: helm ## Lint the Helm chart in dist/chart.
	$(HELM) lint --strict dist/chart

##@ Docs

# The drive of docs/algorithms.png: 30 requests at once at 00:00:00.900 (2026-02-05, UTC), 100 ms
# before a window boundary, then 25/s for 3 s, through a limit of 10 per 1 s (burst 10).
.PHONY: plots
plots: plot-lease ## Redraw docs/algorithms.png, its trace and its table (docs/algorithms-trace.txt, docs/algorithms.txt), docs/lease.png and docs/dashboard.png.
	@mkdir -p docs
	t=1770249600900; { for i in {1..30}; do echo $$t; done; for i in {1..75}; do echo $$((t + 40 * i)); done; } > docs/algorithms-trace.txt
	go run ./cmd/sluicectl simulate compare \
	  --algorithms FixedWindow,SlidingWindowLog,SlidingWindowCounter,TokenBucket,LeakyBucket/Meter,LeakyBucket/Queue \
	  --limit 10 --window 1s --burst 10 --max-delay 1s \
	  --title "30 requests at once, then 25/s for 3 s, through a limit of 10 per 1 s (burst 10)" \
	  --plot docs/algorithms.png < docs/algorithms-trace.txt | tee docs/algorithms.txt
	@hack/ensure-prometheus.sh
	# docs/dashboard.png: the dashboard's panels from test/prometheus' Prometheus, after a 3.5-minute drive.
	SLUICE_DASHBOARD_PNG=$(CURDIR)/docs/dashboard.png KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" \
	  go test -count=1 -timeout 15m -run TestRulesAndDashboardQueriesReturnData ./test/prometheus

# The drive of docs/lease.png: 50/s for 3.5 s (below the rate: the pods lease), 200 at once, then
# 200/s for 2 s, over 2 pods (round robin), through a TokenBucket of 100 per 1 s (burst 100)
# leased with maxAge 1s, next to the exact rule on the same trace.
.PHONY: plot-lease
plot-lease: ## Redraw docs/lease.png (a leased and an exact rule on one trace), its trace and its report (docs/lease-trace.txt, docs/lease.txt).
	@mkdir -p docs
	t=1770249600000; { for i in $$(seq 0 174); do echo $$((t + 20 * i)); done; for i in $$(seq 200); do echo $$((t + 3500)); done; \
	  for i in $$(seq 400); do echo $$((t + 3500 + 5 * i)); done; } > docs/lease-trace.txt
	go run ./cmd/sluicectl simulate --algorithm TokenBucket --limit 100 --window 1s --burst 100 \
	  --pods 2 --lease-max-age 1s --plot docs/lease.png < docs/lease-trace.txt | tee docs/lease.txt

##@ Benchmarks

BENCHSTAT ?= $(LOCALBIN)/benchstat
BENCHSTAT_VERSION ?= v0.0.0-20260908200009-22c9c6c9d4da

.PHONY: benchstat
benchstat: $(BENCHSTAT)-$(BENCHSTAT_VERSION) ## Install benchstat into ./bin.
$(BENCHSTAT)-$(BENCHSTAT_VERSION): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)
	touch $@

.PHONY: bench
bench: benchstat ## Benchmark the limiter, the Redis store and the proxy path against their references into bench/results.md (BENCH_COUNT=5 BENCH_REPEAT=1).
	BENCHSTAT=$(BENCHSTAT) bench/bench.sh

.PHONY: chaos
chaos: ## Kill, restart, pause and resume Redis under load through two sidecars, then the fault matrix (Sentinel and Cluster failover, slow Redis, a 1M-key flood); figures go to bench/chaos.md.
	bench/chaos.sh

##@ Deployment

# The version the binaries print (--version), the images are tagged and labelled with, and the
# chart runs by default: the chart's appVersion, so that make images and helm install agree.
VERSION ?= $(shell sed -n 's/^appVersion: *//p' dist/chart/Chart.yaml)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# REGISTRY=host/prefix pushes REGISTRY/sluice-{manager,sidecar,ratelimit}:VERSION; empty writes
# bin/images/sluice-*.tar for ctr images import or kind load image-archive.
REGISTRY ?=
# Where the archives go, and the repository prefix they name their images with.
IMAGES_OUT ?= $(LOCALBIN)/images
IMAGES_NAME_PREFIX ?= ghcr.io/sluice-dev
GOARCH_IMAGES ?= amd64
IMAGES_LDFLAGS = -s -w -buildid= -X github.com/sluice-dev/sluice/internal/version.Version=$(VERSION)

.PHONY: images
images: ## Build the manager, sidecar and RLS server images without Docker: push with REGISTRY=host/prefix, else OCI archives in bin/images.
	mkdir -p $(IMAGES_OUT)/bin
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_IMAGES) go build -trimpath -ldflags "$(IMAGES_LDFLAGS)" -o $(IMAGES_OUT)/bin/manager ./cmd/manager
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_IMAGES) go build -trimpath -ldflags "$(IMAGES_LDFLAGS)" -o $(IMAGES_OUT)/bin/sluice-sidecar ./sidecar
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_IMAGES) go build -trimpath -ldflags "$(IMAGES_LDFLAGS)" -o $(IMAGES_OUT)/bin/sluice-ratelimit ./cmd/ratelimit
	cd hack/images && go run . -version $(VERSION) -revision "$(REVISION)" -arch $(GOARCH_IMAGES) \
	    -out $(abspath $(IMAGES_OUT)) -name-prefix $(IMAGES_NAME_PREFIX) $(if $(REGISTRY),-registry $(REGISTRY)) \
	    manager=$(abspath $(IMAGES_OUT))/bin/manager sidecar=$(abspath $(IMAGES_OUT))/bin/sluice-sidecar ratelimit=$(abspath $(IMAGES_OUT))/bin/sluice-ratelimit

IMG ?= ghcr.io/sluice-dev/sluice-manager:$(VERSION)
SIDECAR_IMG ?= ghcr.io/sluice-dev/sluice-sidecar:$(VERSION)
RLS_IMG ?= ghcr.io/sluice-dev/sluice-ratelimit:$(VERSION)
CONTAINER_TOOL ?= docker
KUSTOMIZE ?= $(LOCALBIN)/kustomize
KUSTOMIZE_VERSION ?= v5.8.1
KUBECTL ?= kubectl

.PHONY: docker-build
docker-build: ## Build the manager (IMG), sidecar (SIDECAR_IMG) and RLS server (RLS_IMG) images.
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(IMG) -f Dockerfile .
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(SIDECAR_IMG) -f Dockerfile.sidecar .
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(RLS_IMG) -f Dockerfile.ratelimit .

.PHONY: docker-push
docker-push: ## Push the three images.
	$(CONTAINER_TOOL) push $(IMG)
	$(CONTAINER_TOOL) push $(SIDECAR_IMG)
	$(CONTAINER_TOOL) push $(RLS_IMG)

# deploy renders config/default through a throw-away overlay that sets the three images, so the
# tracked kustomizations are never edited.
.PHONY: deploy
deploy: manifests kustomize ## Deploy to the cluster in ~/.kube/config: make deploy IMG=... SIDECAR_IMG=... RLS_IMG=...
	@overlay=$$(mktemp -d); trap 'rm -rf $$overlay' EXIT; \
	printf 'resources:\n- %s\n' "$$(realpath --relative-to=$$overlay $(CURDIR)/config/default)" > $$overlay/kustomization.yaml; \
	cd $$overlay && $(KUSTOMIZE) edit set image ghcr.io/sluice-dev/sluice-manager=$(IMG) ghcr.io/sluice-dev/sluice-sidecar=$(SIDECAR_IMG) ghcr.io/sluice-dev/sluice-ratelimit=$(RLS_IMG) && \
	$(KUSTOMIZE) build $$overlay | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize ## Remove what deploy installed (the CRD and every RateLimitPolicy too).
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: kustomize
kustomize: $(KUSTOMIZE)-$(KUSTOMIZE_VERSION) ## Install kustomize into ./bin.
$(KUSTOMIZE)-$(KUSTOMIZE_VERSION): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	touch $@

##@ End-to-end

.PHONY: test-realnode
test-realnode: ## Run test/realnode: Sluice on a real single-node Kubernetes (root, Linux; SKIPs elsewhere, fails under CI=true).
	hack/realnode/test.sh
