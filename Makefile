# Sluice. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD, RBAC and webhook manifests from markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## go fmt.
	go fmt ./...

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: manifests generate ## Fail when generated files or go.mod are stale.
	go mod tidy
	@if [ -n "$$(git status --porcelain -- api config go.mod go.sum)" ]; then \
		echo "Generated files are stale; run 'make manifests generate' and 'go mod tidy' and commit:"; \
		git status --porcelain -- api config go.mod go.sum; git --no-pager diff --stat -- api config go.mod go.sum; exit 1; fi

.PHONY: redis
redis: ## Install redis-server via apt when missing.
	@hack/ensure-redis.sh

.PHONY: envtest
envtest: ## Provide envtest binaries (kube-apiserver, etcd) and print their directory.
	@hack/envtest-assets.sh

.PHONY: test
test: manifests generate fmt vet redis ## Run every test against a real API server (envtest) and real redis-server.
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go test -race -count=1 ./... -coverprofile cover.out

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the binaries into ./bin.
	go build -o $(LOCALBIN)/manager ./cmd/manager
	go build -o $(LOCALBIN)/sluicectl ./cmd/sluicectl

.PHONY: run
run: manifests generate fmt vet ## Run the manager against the cluster in ~/.kube/config.
	go run ./cmd/manager

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
