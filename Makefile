# shardfence: the two commands are `make run` and `make test`.
# Everything a fresh machine with Go (and Node.js for Azurite) needs is
# installed by `make tools`, which `make test` runs first. Test-server binaries
# are cached outside the module, so a second run on the same machine reuses them.
# Three Go modules are tested: the shardfence module (.), e2e/, which holds
# the tests against stores in Docker containers (testcontainers-go), and
# deploy/, which checks the deployment files (k8s.io/api, promtool,
# systemd-analyze); both kept out of the shardfence module's requirements.

GO            ?= go
TOOLS_DIR     ?= $(or $(SHARDFENCE_TOOLS_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/shardfence/tools)
BIN_DIR       := $(TOOLS_DIR)/bin
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
VERSITYGW_VERSION := v1.8.0
AZURITE_VERSION := 3.35.0
STATICCHECK_VERSION := v0.8.2
BUF_VERSION   := v1.75.0
# protoc-gen-go and protoc-gen-connect-go follow the module versions in go.mod.
PROTOC_GEN_GO_VERSION := v1.36.12
CONNECT_GO_VERSION := v1.21.1
# fake-gcs-server runs as a separate test program, like MinIO: linked into the
# tests it would make its dependencies (Pub/Sub, gRPC servers...) requirements
# of the module.
FAKE_GCS_VERSION := v1.56.1
# promtool checks and unit-tests the alerting rules (deploy/prometheus); the
# Go module version v0.316.0 is Prometheus 3.16.0.
PROMTOOL_VERSION := v0.316.0
# promtool is built with Kubernetes service discovery alone (what
# deploy/prometheus/prometheus.yml uses): the other discoveries (AWS, Azure,
# GCE, Consul, ...) are most of its build and nothing here reads them.
PROMTOOL_TAGS := remove_all_sd,enable_kubernetes_sd
# The tools are built without DWARF tables: a shorter link, the same program.
TOOL_LDFLAGS  := -ldflags=-w
# The container tests' images, built locally from the binaries above (never
# pulled); SHARDFENCE_MINIO_IMAGE / SHARDFENCE_VERSITYGW_IMAGE choose others.
MINIO_IMAGE     := shardfence/minio-test:$(MINIO_VERSION)
VERSITYGW_IMAGE := shardfence/versitygw-test:$(VERSITYGW_VERSION)
MODULES       := . e2e deploy
# What `shardfence version` prints and the image's tag: the nearest tag, else
# the commit (with -dirty for uncommitted changes); override with VERSION=.
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT        ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS       := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
IMAGE         ?= shardfence:$(VERSION)

export SHARDFENCE_TOOLS_DIR := $(TOOLS_DIR)
export PATH := $(BIN_DIR):$(TOOLS_DIR)/node_modules/.bin:$(PATH)

.PHONY: all run build image cluster test test-go test-race test-side fuzz fuzz-brief lint tools tool-set mod-download docker-engine test-images bench verify jepsen sim sim-brief clean generate

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/shardfence ./cmd/shardfence
	$(GO) build -o bin/kv ./examples/kv

run: build
	@echo "Starting the sidecar on 127.0.0.1:7400 with its store in ./data (Ctrl-C stops it)."
	@echo "In another shell, open a shard, append and read:"
	@echo "  ./bin/shardfence open --shard demo --term 1 --allocation a1"
	@echo "  ./bin/shardfence append --shard demo --op hello --op world"
	@echo "  ./bin/shardfence read --shard demo"
	@echo "The same over plain JSON (ops are base64):"
	@echo "  curl -s -H 'Content-Type: application/json' -d '{\"shard\":\"demo\",\"ops\":[\"aGk=\"]}' http://127.0.0.1:7400/shardfence.sidecar.v1.SidecarService/Append"
	@echo "  curl -s -H 'Content-Type: application/json' -d '{\"shard\":\"demo\"}' http://127.0.0.1:7400/shardfence.sidecar.v1.SidecarService/Status"
	@echo
	./bin/shardfence serve --store file://./data --listen 127.0.0.1:7400

# image builds shardfence:VERSION FROM scratch (a static binary, the host's CA
# certificates, a non-root user, a /data volume; scripts/build-image) in the
# engine scripts/with-docker provides, nothing pulled, and saves it to
# bin/shardfence-image.tar too: a private engine with-docker started is gone
# after the run, so `docker load -i bin/shardfence-image.tar` brings it back.
image:
	scripts/with-docker scripts/build-image $(IMAGE) $(VERSION) $(COMMIT) bin/shardfence-image.tar

# cluster runs a local cluster in containers until interrupted: MinIO, a
# master and a standby, three sidecars and three example kv primaries, from
# the images built here (scripts/cluster; nothing pulled). It needs the
# engine for as long as it runs, so it runs inside scripts/with-docker.
cluster: $(BIN_DIR)/minio
	scripts/with-docker sh -c 'scripts/build-image $(IMAGE) $(VERSION) $(COMMIT) && \
	  scripts/build-test-image $(MINIO_IMAGE) $(BIN_DIR)/minio && \
	  SHARDFENCE_IMAGE=$(IMAGE) SHARDFENCE_MINIO_IMAGE=$(MINIO_IMAGE) scripts/cluster run'

# test runs with a Docker engine for the container tests: one that answers
# already, else (as root) a private dockerd started for the run and stopped
# after it, whatever the outcome (scripts/with-docker).
test: tools lint
	scripts/with-docker $(MAKE) --no-print-directory test-images test-go

# test-go runs the three modules' tests in two lanes side by side: the
# race run of the shardfence module (its multi-process tests run in
# parallel, -parallel $(TEST_PARALLEL)), and beside it test-side: the
# simulation (sim-brief, one core), a brief run of the fuzz targets
# (fuzz-brief), the protocol checker's brief scopes, the deploy module's
# and the e2e module's tests; the e2e module's need a Docker engine and
# the images of test-images (without an engine they skip, or fail under
# CI). The masters and sidecars the multi-process tests start, and the
# e2e module's tests, run without the race detector here: the race run
# covers the same code in process, and a race-built child costs about a
# third more CPU; make verify runs them race-built. Each lane's output is printed
# whole when it ends (make -O). Every part runs even when another fails,
# so one run reports on all, and test-go fails when any part does.
TEST_PARALLEL ?= 4
# TESTFLAGS are make test's go test flags: -vet=off because make lint's
# go vet ./... already runs every vet check (go test's own run is a
# subset of them) over every package and its tests; -ldflags=-w leaves the
# DWARF tables out of the test binaries, a third of their link time
# (panics, stack traces and race reports read the symbol table, not DWARF).
TESTFLAGS ?= -vet=off -ldflags=-w

test-go:
	@$(MAKE) --no-print-directory -k -j2 -Otarget test-race test-side

# The race run leaves out the protocol checker (verify): test-side runs its
# brief scopes without the race detector, the same 2,000 states a scope in
# a sixth of the time (35 s against 206 s on a quiet machine); make verify
# runs them under the race detector.
test-race:
	$(GO) test -race $(TESTFLAGS) -count=1 -timeout 40m -parallel $(TEST_PARALLEL) $$($(GO) list ./... | grep -v '/verify$$')

test-side:
	@rc=0; \
	echo "$(MAKE) sim-brief"; \
	$(MAKE) --no-print-directory sim-brief || rc=1; \
	echo "$(MAKE) fuzz-brief"; \
	$(MAKE) --no-print-directory fuzz-brief || rc=1; \
	echo "SHARDFENCE_VERIFY=brief $(GO) test $(TESTFLAGS) -count=1 -timeout 20m ./verify"; \
	SHARDFENCE_VERIFY=brief $(GO) test $(TESTFLAGS) -count=1 -timeout 20m ./verify || rc=1; \
	echo "cd deploy && $(GO) test $(TESTFLAGS) -count=1 -timeout 15m ./..."; \
	(cd deploy && $(GO) test $(TESTFLAGS) -count=1 -timeout 15m ./...) || rc=1; \
	echo "cd e2e && $(GO) test $(TESTFLAGS) -count=1 -timeout 30m ./..."; \
	(cd e2e && $(GO) test $(TESTFLAGS) -count=1 -timeout 30m ./...) || rc=1; \
	exit $$rc

# The fuzz targets (docs/VERIFICATION.md, "Fuzzing"), as package:Target.
# `go test` runs each one's seed corpus (its f.Add inputs and
# testdata/fuzz/Target/) as a test, so make test's race run runs them all;
# fuzzing mutates them. The API targets drive the master's and the
# sidecar's real HTTP handlers; the pure ones the validators and the store
# URL redaction; the decode ones the decoders of what the store holds.
FUZZ_API_TARGETS := ./master/ha:FuzzMasterAPI ./sidecar:FuzzSidecarAPI
FUZZ_PURE_TARGETS := ./master:FuzzNames ./master/internal/fleetplan:FuzzNodeAddr ./sidecar:FuzzValidateName \
	./internal/ident:FuzzValidate ./internal/echo:FuzzClipN ./blobstore:FuzzRedact
FUZZ_DECODE_TARGETS := ./fence:FuzzDecodeRecord ./master:FuzzDecodeEntry ./master:FuzzSnapshotManifest \
	./master:FuzzSnapshotPayload ./blobstore:FuzzValidateKey ./translog:FuzzDecodeMD ./translog:FuzzDecodeData \
	./translog:FuzzDecodeOps
FUZZTIME       ?= 60s
FUZZTIME_BRIEF ?= 3s
FUZZFLAGS      ?=

# fuzz runs every fuzz target for FUZZTIME (make fuzz FUZZTIME=10m); a
# failing input is written under the package's testdata/fuzz/ and then
# fails plain `go test` until fixed. A target named here that its package
# does not declare fails the run (go test would fuzz nothing and pass).
fuzz:
	@for t in $(FUZZ_API_TARGETS) $(FUZZ_PURE_TARGETS) $(FUZZ_DECODE_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  if ! grep -qs "^func $$name(f \*testing.F)" $$pkg/*_test.go; then \
	    echo "fuzz: $$pkg declares no $$name (a target moved? fix the Makefile's lists)"; exit 1; fi; \
	  echo "$(GO) test -run '^$$' -fuzz '^$$name\$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg || exit 1; \
	done

# fuzz-brief is make test's short run: the pure targets, 3 s each (they
# mutate from their first second). The API targets are left to make fuzz:
# before their first mutation they run the corpus under coverage, 7 s on a
# quiet machine and more than 10 s under make test's load, so a brief run
# of them only repeated what the race run already runs.
fuzz-brief:
	@$(MAKE) --no-print-directory fuzz FUZZ_API_TARGETS= FUZZ_DECODE_TARGETS= FUZZTIME=$(FUZZTIME_BRIEF)

# test-images builds the container tests' images from the binaries `make
# tools` built: FROM scratch, the binary and the libraries it links, about 3 s.
# Without an engine it says so and builds nothing (the tests report it).
test-images: $(BIN_DIR)/minio $(BIN_DIR)/versitygw
	@if docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then \
	  scripts/build-test-image $(MINIO_IMAGE) $(BIN_DIR)/minio && \
	  scripts/build-test-image $(VERSITYGW_IMAGE) $(BIN_DIR)/versitygw; \
	else echo "test-images: no Docker engine answers; no image built (scripts/with-docker starts one)"; fi

# lint checks both modules: gofmt, go vet, staticcheck, and that go.mod and
# go.sum are tidy.
lint: $(BIN_DIR)/staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do \
	  if ! diff=$$(cd $$m && $(GO) mod tidy -diff 2>&1); then \
	    echo "$$m/go.mod or go.sum is not tidy: run 'cd $$m && go mod tidy' and commit the result:"; echo "$$diff"; exit 1; \
	  fi; \
	  echo "vet and staticcheck in $$m"; \
	  (cd $$m && $(GO) vet ./... && $(BIN_DIR)/staticcheck ./...) || exit 1; \
	done

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s ./blobstore/...

# tools builds what make test needs, TOOLS_JOBS at a time (the longest
# first): one build's downloads and single-threaded link overlap another's
# compile. Each is built once per machine. protoc-gen-go and
# protoc-gen-connect-go are make generate's alone.
TOOLS_JOBS ?= 3
TOOL_TARGETS := $(BIN_DIR)/minio $(BIN_DIR)/promtool $(BIN_DIR)/versitygw $(BIN_DIR)/buf $(BIN_DIR)/fake-gcs-server \
	$(BIN_DIR)/staticcheck $(TOOLS_DIR)/node_modules/.bin/azurite-blob docker-engine mod-download

tools:
	@$(MAKE) --no-print-directory -j$(TOOLS_JOBS) tool-set

tool-set: $(TOOL_TARGETS)

# mod-download fetches the three modules' requirements.
mod-download:
	@for m in $(MODULES); do (cd $$m && $(GO) mod download) || exit 1; done

# docker-engine installs Debian's docker.io as root where no dockerd exists;
# otherwise it says what to do (scripts/install-docker).
docker-engine:
	@scripts/install-docker

# generate rewrites the committed protobuf and Connect code under api/.
generate: $(BIN_DIR)/buf $(BIN_DIR)/protoc-gen-go $(BIN_DIR)/protoc-gen-connect-go
	cd api && $(BIN_DIR)/buf lint && $(BIN_DIR)/buf generate

$(BIN_DIR)/buf:
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install $(TOOL_LDFLAGS) github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

$(BIN_DIR)/protoc-gen-go:
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install $(TOOL_LDFLAGS) google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN_DIR)/protoc-gen-connect-go:
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install $(TOOL_LDFLAGS) connectrpc.com/connect/cmd/protoc-gen-connect-go@$(CONNECT_GO_VERSION)

$(BIN_DIR)/staticcheck:
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install $(TOOL_LDFLAGS) honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# MinIO is a separate test program (AGPL): built, never imported or linked.
$(BIN_DIR)/minio:
	@mkdir -p $(BIN_DIR)
	@echo "building MinIO $(MINIO_VERSION) into $(BIN_DIR) (several minutes, once per machine)"
	cd $(TOOLS_DIR) && GOBIN=$(BIN_DIR) GOFLAGS=-mod=mod $(GO) install $(TOOL_LDFLAGS) github.com/minio/minio@$(MINIO_VERSION)

$(BIN_DIR)/versitygw:
	@mkdir -p $(BIN_DIR)
	@echo "building versitygw $(VERSITYGW_VERSION) into $(BIN_DIR) (a few minutes, once per machine)"
	cd $(TOOLS_DIR) && GOBIN=$(BIN_DIR) GOFLAGS=-mod=mod $(GO) install $(TOOL_LDFLAGS) github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

$(BIN_DIR)/promtool:
	@mkdir -p $(BIN_DIR)
	@echo "building promtool $(PROMTOOL_VERSION) into $(BIN_DIR) (a few minutes, once per machine)"
	cd $(TOOLS_DIR) && GOBIN=$(BIN_DIR) GOFLAGS=-mod=mod $(GO) install $(TOOL_LDFLAGS) -tags $(PROMTOOL_TAGS) github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

$(BIN_DIR)/fake-gcs-server:
	@mkdir -p $(BIN_DIR)
	cd $(TOOLS_DIR) && GOBIN=$(BIN_DIR) GOFLAGS=-mod=mod $(GO) install $(TOOL_LDFLAGS) github.com/fsouza/fake-gcs-server@$(FAKE_GCS_VERSION)

$(TOOLS_DIR)/node_modules/.bin/azurite-blob:
	@mkdir -p $(TOOLS_DIR)
	@command -v npm >/dev/null || { echo "npm is needed for Azurite: apt-get install -y nodejs npm"; exit 1; }
	cd $(TOOLS_DIR) && npm install --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION)

# verify runs what make test runs lighter: every test under the race
# detector with the multi-process tests' masters and sidecars race-built
# too (SHARDFENCE_CHILD_RACE=1; a race ends the child, and so fails its
# test), the e2e module under the race detector, and the checker's deep
# scopes.
verify:
	SHARDFENCE_CHILD_RACE=1 $(GO) test -race -count=1 -timeout 80m -tags verify ./...
	scripts/with-docker sh -c '$(MAKE) --no-print-directory test-images && cd e2e && SHARDFENCE_CHILD_RACE=1 $(GO) test -race -count=1 -timeout 30m ./...'
	@# The protocol checker's deep scopes: larger state bounds, 10,000 random
	@# walks; no race detector, so it explores about eight times as many states.
	SHARDFENCE_VERIFY=deep $(GO) test -count=1 -timeout 80m -v -run 'TestWritePath|TestClaims|TestRecovery|TestCreateOnly|TestModes|TestBarrier|TestRandomWalks|TestElection|TestZombieRead|TestLease|TestRelocation|TestCheckpoints' ./verify/

# The whole-system simulation (docs/VERIFICATION.md, "Simulation of the
# whole system"): masters, sidecars, agents and clients in one process, on
# simulated time, with seeded faults. The race run of ./... runs a few seeds;
# sim-brief is make test's run without the race detector (SIM_SEEDS seeds,
# and the tests that show it finds the re-created bugs); sim runs SIM_LONG
# seeds and is not part of make test. SIM_FIRST picks the first seed.
# 1,000 seeds keep make test under 10 minutes on a 2-core machine (2,000
# took 335 s of its side lane); make sim runs the rest.
SIM_SEEDS ?= 1000
SIM_LONG  ?= 100000
SIM_FIRST ?= 1

sim-brief:
	$(GO) test $(TESTFLAGS) -count=1 -timeout 30m -run 'TestSimSeeds$$|TestSimFinds|TestSameSeedSameTrace' ./sim -sim.seeds $(SIM_SEEDS) -sim.first $(SIM_FIRST)

sim:
	$(GO) test -count=1 -timeout 0 -v -run 'TestSimSeeds$$' ./sim -sim.seeds $(SIM_LONG) -sim.first $(SIM_FIRST)

# jepsen runs the example key-value service's nemesis test in its long form:
# several seeds, minutes each, every fault kind (docs/VERIFICATION.md,
# "Linearizability of an application on top"). SHARDFENCE_NEMESIS_SEED=N
# replays one seed. make test runs the short form.
jepsen: $(BIN_DIR)/minio
	SHARDFENCE_JEPSEN=1 $(GO) test -count=1 -timeout 150m -v -run 'TestKVLinearizableThroughFailovers' ./examples/kv/nemesis/

clean:
	rm -rf bin data
