# celaudit — audit stored Kubernetes objects against the CEL rules the cluster declares.

IMG ?= celaudit:latest
LOCALBIN ?= $(shell pwd)/bin
CACHE_DIR ?= $(HOME)/.cache/celaudit
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# The controllers envtest suite takes 4-7 minutes on two cores: go test's default 10-minute limit per package is
# too close to it.
GO_TEST_FLAGS ?= -count=1 -timeout=25m
BENCH_OBJECTS ?= 10000
BENCH_AUDIT_POLICIES ?= 0
BENCH_NAMESPACES ?= 100
BENCH_ETCD_SEED ?=
DEMO_ARGS ?=
# How long make fuzz runs each fuzz target, and how long make test runs each after the seed corpora. make test
# counts inputs rather than time: with Go before 1.27 a time limit can end a healthy run with a spurious
# "context deadline exceeded" (golang/go#75804), a count has no deadline to race. 400 inputs take 5-10 s for
# the slowest targets on two cores.
FUZZTIME ?= 10s
TEST_FUZZTIME ?= 400x

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs and RBAC from the markers in api/ and controllers/.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/..." paths="./controllers/..." output:crd:artifacts:config=config/crd/bases
	@$(MAKE) --no-print-directory chart-sync

# The chart cannot read files outside charts/celaudit: it holds copies of the generated CRDs and ClusterRole,
# of the restricted read rules and of the dashboard, which test/chart checks against config/.
CHART_DIR = charts/celaudit
.PHONY: chart-sync
chart-sync: ## Copy the generated CRDs and RBAC and the Grafana dashboard from config/ into the Helm chart.
	cp config/crd/bases/audit.celaudit.io_auditpolicies.yaml config/crd/bases/audit.celaudit.io_auditshards.yaml $(CHART_DIR)/crds/
	cp config/crd/bases/wgpolicyk8s.io_policyreports.yaml config/crd/bases/wgpolicyk8s.io_clusterpolicyreports.yaml $(CHART_DIR)/files/crds/
	cp config/rbac/role.yaml $(CHART_DIR)/files/rbac/role.yaml
	cp config/components/restricted-read/resource_reader_restricted.yaml $(CHART_DIR)/files/rbac/resource_reader_restricted.yaml
	cp config/grafana/celaudit-dashboard.json $(CHART_DIR)/files/celaudit-dashboard.json

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods for the API types.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: verify-gen
verify-gen: manifests generate ## Regenerate and fail if the committed generated files differ.
	@git diff --exit-code -- api config charts || { echo "generated files are out of date: run 'make manifests generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config charts)" || { git status --porcelain -- api config charts; echo "untracked generated files"; exit 1; }

.PHONY: discovery-snapshot
discovery-snapshot: envtest ## Take the discovery snapshot of kube-apiserver's built-in APIs that internal/views embeds.
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" go run ./hack/discovery-snapshot -o internal/views/builtin_discovery.json

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: envtest
envtest: ## Build (once, cached under ~/.cache/celaudit) kube-apiserver, etcd and kubectl for tests and the demo.
	@hack/setup-envtest.sh >/dev/null

.PHONY: helm
helm: ## Build (once, cached under ~/.cache/celaudit/bin) the pinned Helm CLI the chart tests run.
	@hack/setup-helm.sh >/dev/null

##@ Testing

# client-go's consistency detectors, read once when a test binary starts: every informer checks that nothing
# mutates the objects in its cache (a panic "cache mutation detected") and that what a watch-list stream gave it
# equals a LIST at the same resourceVersion (a panic "data inconsistency detected").
.PHONY: test
test: export KUBE_CACHE_MUTATION_DETECTOR = true
test: export KUBE_WATCHLIST_INCONSISTENCY_DETECTOR = true
test: envtest helm ## Run unit tests, envtest integration tests (with client-go's consistency detectors on) and each fuzz target for TEST_FUZZTIME inputs.
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" HELM="$$(hack/setup-helm.sh)" go test $(GO_TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

# The fuzz targets, as package:Target. go test fuzzes one target per invocation; plain go test runs each one's
# seed corpus (f.Add and testdata/fuzz/<Target>) like any other test.
FUZZ_TARGETS = \
	./internal/crdrules:FuzzFindings \
	./internal/vap:FuzzEvaluate \
	./internal/listjson:FuzzDecodeList \
	./internal/report:FuzzBuildAndDiff \
	./internal/manifests:FuzzDecode \
	./internal/uidmap:FuzzPack

.PHONY: fuzz
fuzz: ## Fuzz each target for FUZZTIME (default 10s); an input that fails is kept in the package's testdata/fuzz.
	@for target in $(FUZZ_TARGETS); do \
		pkg=$${target%%:*}; name=$${target##*:}; \
		echo "go test -run='^$$' -fuzz='^$$name\$$' -fuzztime=$(FUZZTIME) $$pkg"; \
		go test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	done

.PHONY: test-chart
test-chart: envtest helm ## Lint and render the Helm chart, compare it with config/, dry-run it against a kube-apiserver.
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" HELM="$$(hack/setup-helm.sh)" go test $(GO_TEST_FLAGS) ./test/chart/...

.PHONY: bench
bench: envtest ## Run the micro and macro benchmarks and record them in BENCHMARKS.md.
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" BENCH_OBJECTS=$(BENCH_OBJECTS) BENCH_AUDIT_POLICIES="$(BENCH_AUDIT_POLICIES)" BENCH_NAMESPACES=$(BENCH_NAMESPACES) BENCH_ETCD_SEED=$(BENCH_ETCD_SEED) hack/bench.sh

# Object counts of make bench-mutate, one run each.
BENCH_MUTATE_OBJECTS ?= 10000 100000

.PHONY: bench-mutate
bench-mutate: envtest ## Measure MutatingAdmissionPolicy pairs beside ValidatingAdmissionPolicy pairs in memory (BENCH_MUTATE_OBJECTS) and record them in BENCHMARKS.md.
	for n in $(BENCH_MUTATE_OBJECTS); do \
		go run ./test/bench/macro -mutate -objects $$n -out test/bench/results/mutate-$$n.md || exit 1; \
	done
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" BENCH_OBJECTS=none BENCH_MICRO=0 hack/bench.sh

##@ Build

.PHONY: build
build: ## Build the celaudit operator and the kubectl-celaudit plugin into bin/.
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/celaudit .
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/kubectl-celaudit ./cmd/kubectl-celaudit

.PHONY: install-plugin
install-plugin: ## Install kubectl-celaudit into $(GOBIN) (or ~/go/bin), where kubectl finds it as "kubectl celaudit" if it is on the PATH.
	CGO_ENABLED=0 go install -trimpath ./cmd/kubectl-celaudit

.PHONY: run
run: ## Run celaudit against the cluster of the current kubeconfig.
	go run . $(ARGS)

# The demo is built and then run, not "go run", which exits 1 whenever it is interrupted: Ctrl-C, the way to
# stop it, ends it with the demo's own status, 0. exec leaves no shell between make and the demo to die of
# the signal.
.PHONY: demo
demo: envtest ## Start a local kube-apiserver and etcd, store objects, tighten their rules and show the reports.
	go build -o $(LOCALBIN)/demo ./test/demo
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" exec $(LOCALBIN)/demo $(DEMO_ARGS)

.PHONY: docker-build
docker-build: ## Build the container image.
	docker build -t $(IMG) .

##@ Deployment

.PHONY: install
install: manifests ## Install the report CRDs into the cluster of the current kubeconfig.
	kubectl apply -k config/crd

.PHONY: uninstall
uninstall: ## Remove the report CRDs.
	kubectl delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: manifests ## Deploy celaudit (CRDs, RBAC, Deployment) with image $(IMG).
	cd config/manager && kubectl kustomize . >/dev/null
	kubectl apply -k config/default

.PHONY: undeploy
undeploy: ## Remove the deployment.
	kubectl delete --ignore-not-found -k config/default

##@ Tools

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Install controller-gen into bin/.
$(CONTROLLER_GEN):
	@mkdir -p $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(LOCALBIN)/controller-gen $@

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Install golangci-lint into bin/.
$(GOLANGCI_LINT):
	@mkdir -p $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/golangci-lint $@
