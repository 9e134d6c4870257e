# gpudra build and test entry points. CI runs `make test` and `make e2e` through .ci/run.
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
# go-nvml's cgo bindings use NVML functions that nvml.h marks deprecated; silence those warnings.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

PKGS := ./...

# The reference driver binary: `make build`, the Dockerfile and the e2e tier all build it so.
BIN ?= bin/gpu-dra-driver
DRIVER_BUILD_FLAGS := -trimpath -ldflags "-s -w"
IMAGE ?= ghcr.io/gpudra/gpu-dra-driver:0.1.0
CONTAINER_TOOL ?= docker

.PHONY: all test large-files func-size nocgo unit vet staticcheck lint fmt-check bench fuzz churn islands random-long crash-all build build-cd image e2e e2e-binaries e2e-node e2e-node-binaries bench-e2e bench-e2e-latency bench-e2e-start bench-e2e-node-start bench-e2e-memory bench-e2e-scale bench-e2e-patch-test bench-e2e-scheduler-perf demo render generate verify-generate

all: test

## test: vet, staticcheck, gofmt and function-size checks, the cgo-free build, then unit and
## integration tests with the race detector.
test: large-files func-size fmt-check verify-generate vet staticcheck nocgo unit

# The node-runtime tests write checkpoints, CDI specs and sockets by the thousand: on tmpfs when
# the machine has one, as kubelet's pod directories and /run usually are. The race detector's
# default one-second sleep at exit is paid by every test binary and crash-test child: skip it.
TEST_TMPDIR ?= $(shell test -d /dev/shm -a -w /dev/shm && echo /dev/shm || echo $${TMPDIR:-/tmp})
unit:
	TMPDIR=$(TEST_TMPDIR) GORACE="atexit_sleep_ms=0 $$GORACE" $(GO) test -race -count=1 $(PKGS)

vet:
	$(GO) vet $(PKGS)

## nocgo: what a driver for another kind of device imports (draplugin/exclusive, its test harness
## exclusivetest, kubelettest, testhooks) builds, vets and passes its tests with CGO_ENABLED=0,
## the FPGA-style test of docs/driver-authors.md included (guide_test.go checks that the guide's
## examples of that section are in these packages). -race needs cgo: unit runs them with it.
NOCGO_PKGS := ./draplugin/exclusive/... ./draplugin/kubelettest ./draplugin/testhooks
nocgo:
	CGO_ENABLED=0 $(GO) vet $(NOCGO_PKGS)
	CGO_ENABLED=0 $(GO) test -count=1 $(NOCGO_PKGS)

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

## large-files: fail on a tracked file over 1 MiB not in hack/large-files.allow (build output).
large-files:
	hack/check-large-files

## func-size: fail on a function over 80 lines or cyclomatic complexity 20 (hack/funcsize; tests
## and generated files aside, the nested test/e2e module included: its framework is read and
## changed as often as the library). Split an offender into steps rather than raise the limits.
func-size:
	$(GO) run ./hack/funcsize .

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## lint: everything static, without running tests.
lint: fmt-check func-size vet staticcheck

## bench: run the benchmarks (results are recorded by hand in docs/benchmarks.md).
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## build: the reference driver binary ($(BIN)); cgo on (go-nvml dlopens libnvidia-ml).
build:
	CGO_ENABLED=1 $(GO) build $(DRIVER_BUILD_FLAGS) -o $(BIN) ./examples/gpu-dra-driver

## build-cd: build the ComputeDomain driver (examples/compute-domain-driver) into $(CD_BIN).
CD_BIN ?= bin/compute-domain-driver
build-cd:
	CGO_ENABLED=1 $(GO) build $(DRIVER_BUILD_FLAGS) -o $(CD_BIN) ./examples/compute-domain-driver

## image: the driver's container image (Dockerfile); CI does not build it.
image:
	$(CONTAINER_TOOL) build -t $(IMAGE) .

## e2e-binaries: build (or reuse from $$GPUDRA_E2E_CACHE, default ~/.cache/gpudra-e2e) etcd,
## kube-apiserver, kube-scheduler and kube-controller-manager at the versions test/e2e pins.
e2e-binaries:
	cd test/e2e && $(GO) run ./cmd/e2e-binaries

## e2e: tier-3 tests against those binaries and the chart (test/e2e, a nested module).
## E2E_RUN selects tests (go test -run); E2E_ARGS are extra test flags (-health.samples=200);
## E2E_KEEP=1 keeps the cluster directory.
E2E_RUN ?= .
E2E_ARGS ?=
e2e: e2e-binaries
	cd test/e2e && $(GO) vet ./... && $(GO) test -count=1 ./framework/... ./cmd/... ./chart/...
	cd test/e2e && $(GO) test -count=1 -v -timeout 45m -run '$(E2E_RUN)' . $(E2E_ARGS)

## e2e-node-binaries: also build (or reuse) kubelet and containerd (cached like the control plane)
## and install runc and the CNI plugins from Debian's packages when missing.
e2e-node-binaries:
	cd test/e2e && $(GO) run ./cmd/e2e-binaries -node

## e2e-node: tier-4 tests on a real node (test/e2e/node): kubelet, containerd and runc on this
## machine run the chart's DaemonSet and GPU pods. Needs root. E2E_NODE_RUN selects tests;
## E2E_KEEP=1 keeps the node's directory and logs.
E2E_NODE_RUN ?= .
e2e-node: e2e-node-binaries
	cd test/e2e && $(GO) test -count=1 -v -timeout 45m -run '$(E2E_NODE_RUN)' ./node/ $(E2E_ARGS)

## bench-e2e: the e2e benchmarks against real control planes; each prints a markdown table
## (docs/benchmarks.md records them). About 10 + 15 minutes on 2 cores.
bench-e2e: bench-e2e-latency bench-e2e-start bench-e2e-memory bench-e2e-scale

## bench-e2e-latency: NodePrepareResources/NodeUnprepareResources through the DRA socket of
## `serve` and of dra-example-driver (built into the e2e cache on first use), claims allocated by
## the real scheduler; BENCH_E2E_CALLS calls per row (a burst row needs at least 100).
BENCH_E2E_CALLS ?= 300
bench-e2e-latency: e2e-binaries
	cd test/e2e && $(GO) test -count=1 -run '^$$' -bench 'PrepareLatency' -benchtime $(BENCH_E2E_CALLS)x -timeout 60m .

## bench-e2e-start: from starting `serve` on a fresh node to its pool visible through the API
## server, 10 nodes (BenchmarkStartToSlices).
## bench-e2e-node-start: pod start latency on the node tier's real kubelet, without a claim,
## with a GPU claim, and with a device of dra-example-driver's plugin installed beside ours
## (BENCH_NODE_ROUNDS rounds, default 10).
BENCH_NODE_ROUNDS ?= 10
bench-e2e-node-start: e2e-node-binaries
	cd test/e2e && $(GO) test -count=1 -run '^$$' -bench 'NodePodStart' -benchtime $(BENCH_NODE_ROUNDS)x -timeout 30m ./node/

## bench-e2e-memory: resident memory of serve and of dra-example-driver's plugin, idle and after
## 1000 prepare/unprepare cycles, side by side in one run.
bench-e2e-memory: e2e-binaries
	cd test/e2e && $(GO) test -count=1 -run '^$$' -bench 'DriverMemory' -benchtime 1x -timeout 20m .

bench-e2e-start: e2e-binaries
	cd test/e2e && $(GO) test -count=1 -run '^$$' -bench 'StartToSlices' -benchtime 10x -timeout 20m .

## bench-e2e-scale: kube-scheduler CPU per pod (and pods/s) on SCALE_NODES nodes whose slices
## the library publishes, SCALE_PODS pods with a claim each, one fresh control plane per run,
## SCALE_REPEAT runs of each kind interleaved, every kind also as a ratio to upstream-basic
## (scheduler_perf's SchedulingWithResourceClaimTemplate shape) of the same run.
## SCALE_PATCHED=1 also builds kube-scheduler with test/e2e/patches/pool-cache.patch (cached
## outside the repository, keyed by version and patch) and runs every kind with it right after
## its unpatched run, as "<kind>+pool-cache" (docs/upstream-pool-cache.md); SCALE_PATCH names
## another patch.
SCALE_NODES ?= 500
SCALE_PODS ?= 2000
SCALE_REPEAT ?= 3
SCALE_KINDS ?= upstream-basic,exclusive,static-mig,static-mig-by-profile,dynamic-mig,dynamic-mig-4-profiles,dynamic-mig-options,consumable-memory
SCALE_PATCHED ?=
SCALE_PATCH ?= $(if $(SCALE_PATCHED),$(CURDIR)/test/e2e/patches/pool-cache.patch)
bench-e2e-scale: e2e-binaries
	cd test/e2e && $(GO) test -count=1 -run '^$$' -bench 'Scheduling' -benchtime 1x -timeout 300m ./scale \
		-scale.nodes=$(SCALE_NODES) -scale.pods=$(SCALE_PODS) -scale.kinds=$(SCALE_KINDS) -scale.repeat=$(SCALE_REPEAT) \
		-scale.patch=$(SCALE_PATCH)
	$(if $(SCALE_SCHEDULER_PERF),$(MAKE) bench-e2e-scheduler-perf)

## bench-e2e-scheduler-perf: upstream's own scheduler_perf DRA workload SCHED_PERF_WORKLOAD from
## the pinned k8s.io/kubernetes (test/e2e/scale/scheduler-perf.sh; etcd from the e2e cache), and
## with SCALE_PATCHED=1 also from the patched sources, SCALE_REPEAT times interleaved: the anchor
## for bench-e2e-scale's figures, which runs it after its own when SCALE_SCHEDULER_PERF=1.
SCHED_PERF_WORKLOAD ?= SchedulingWithResourceClaimTemplate/2000pods_200nodes
bench-e2e-scheduler-perf: e2e-binaries
	cd test/e2e && WORKLOAD=$(SCHED_PERF_WORKLOAD) PATCH=$(SCALE_PATCH) REPEAT=$(SCALE_REPEAT) bash scale/scheduler-perf.sh

## bench-e2e-patch-test: upstream's own tests of the structured allocator (with the race
## detector) and of kube-scheduler's DRA plugin, run against the sources the bench's patch
## (SCALE_PATCH, default test/e2e/patches/pool-cache.patch) makes, through its go.work.
bench-e2e-patch-test: SCALE_PATCH := $(or $(SCALE_PATCH),$(CURDIR)/test/e2e/patches/pool-cache.patch)
bench-e2e-patch-test: e2e-binaries
	cd test/e2e && ws=$$($(GO) run ./cmd/e2e-binaries -patch $(SCALE_PATCH) | sed -n 's/^patched kube-scheduler: //p') && \
		test -n "$$ws" && export GOWORK=$$(dirname $$ws)/go.work && \
		$(GO) test -count=1 -race k8s.io/dynamic-resource-allocation/structured/... && \
		$(GO) test -count=1 k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources/...

## fuzz: run each fuzz target for FUZZTIME (make test runs their seed corpora only).
FUZZTIME ?= 10m
FUZZ_TARGETS := selectors:FuzzCompile selectors/lint:FuzzLint selectors/upgrade:FuzzUpgrade sharing/v1beta1:FuzzDecode mig:FuzzParseProfile \
	simulate:FuzzAllocate selectors/check:FuzzCheck selectors/lint:FuzzParsePolicy mig:FuzzParseConfig internal/checkpoint:FuzzDecode \
	gpu/nvmlgpu:FuzzEnumerateFaults
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; echo "== $$fn ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s ./$$pkg/; \
	done

## random-long: the long randomized node-runtime run (RANDOM_SEQUENCES sequences of prepare,
## unprepare, crash, restart, reboot and NVML faults against the model; hours on 2 cores).
RANDOM_SEQUENCES ?= 10000
random-long:
	TMPDIR=/dev/shm $(GO) test -count=1 -run '^TestRandomSequences$$' -timeout 6h ./draplugin/ -random.sequences=$(RANDOM_SEQUENCES)

## crash-all: the real-kill crash test at every side effect (make test kills at a sample).
crash-all:
	TMPDIR=/dev/shm $(GO) test -count=1 -run '^TestRealCrash$$' -timeout 2h ./draplugin/ -crash.all

## churn: the full MIG churn simulation (10,000 arrivals through the scheduler's allocator; minutes).
churn:
	$(GO) test -count=1 -run '^TestMIGChurn$$' -v -timeout 60m . -churn.full

## islands: the NVLink-island claim streams through the scheduler's allocator (20,000 arrivals per node).
islands:
	$(GO) test -count=1 -run '^TestIslandStreams$$' -v . -islands.full

## demo, render: build the driver ($(BIN)) with progress, then run the command. A cold build
## cache compiles ~600 packages (Kubernetes, NVML bindings): about 6 minutes on 2 cores; go
## build -v names each package as it compiles, so the wait is visible.
demo render: driver-progress
	$(BIN) $@

.PHONY: driver-progress
driver-progress:
	@echo "building $(BIN) (a cold build cache takes about 6 minutes on 2 cores; packages are listed as they compile)"
	CGO_ENABLED=1 $(GO) build -v -o $(BIN) ./examples/gpu-dra-driver

CODE_GENERATOR_VERSION ?= v0.37.2
# controller-gen makes the CustomResourceDefinitions from the API types (computedomain/v1beta1).
CONTROLLER_TOOLS_VERSION ?= v0.23.0

## generate: regenerate the DeepCopy methods (deepcopy-gen) of sharing/v1beta1 and
## computedomain/v1beta1, and the ComputeDomain CRD (controller-gen, deployments/crds).
generate:
	$(GO) run k8s.io/code-generator/cmd/deepcopy-gen@$(CODE_GENERATOR_VERSION) \
		--output-file zz_generated.deepcopy.go --go-header-file hack/boilerplate.go.txt ./sharing/v1beta1 ./computedomain/v1beta1
	$(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION) \
		crd paths=./computedomain/v1beta1/... output:crd:dir=deployments/crds
	cp deployments/crds/*.yaml deployments/helm/gpu-dra-driver/crds/

## verify-generate: fail when the generated files are stale (run by make test).
verify-generate: generate
	@git diff --exit-code -- '*zz_generated*' deployments/crds deployments/helm/gpu-dra-driver/crds || { echo "generated files are stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- deployments/crds deployments/helm/gpu-dra-driver/crds)" || { echo "generated CRDs are not committed: run make generate and commit"; exit 1; }
