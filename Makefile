# shardfence: the two commands are `make run` and `make test`.
# Everything a fresh machine with Go (and Node.js for Azurite) needs is
# installed by `make tools`, which `make test` runs first. Test-server binaries
# are cached outside the module, so a second run on the same machine reuses them.

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
# fake-gcs-server runs inside the test process; it is a Go module dependency.

export SHARDFENCE_TOOLS_DIR := $(TOOLS_DIR)
export PATH := $(BIN_DIR):$(TOOLS_DIR)/node_modules/.bin:$(PATH)

.PHONY: all run build test test-go lint tools bench verify clean generate

all: build

build:
	$(GO) build -o bin/shardfence ./cmd/shardfence

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

test: tools lint test-go

test-go:
	$(GO) test -race -count=1 -timeout 40m ./...

lint: $(BIN_DIR)/staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN_DIR)/staticcheck ./...

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s ./blobstore/...

tools: $(BIN_DIR)/staticcheck $(BIN_DIR)/buf $(BIN_DIR)/protoc-gen-go $(BIN_DIR)/protoc-gen-connect-go $(BIN_DIR)/minio $(BIN_DIR)/versitygw $(TOOLS_DIR)/node_modules/.bin/azurite-blob
	@$(GO) mod download

# generate rewrites the committed protobuf and Connect code under api/.
generate: $(BIN_DIR)/buf $(BIN_DIR)/protoc-gen-go $(BIN_DIR)/protoc-gen-connect-go
	cd api && $(BIN_DIR)/buf lint && $(BIN_DIR)/buf generate

$(BIN_DIR)/buf:
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

$(BIN_DIR)/protoc-gen-go:
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN_DIR)/protoc-gen-connect-go:
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(CONNECT_GO_VERSION)

$(BIN_DIR)/staticcheck:
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# MinIO is a separate test program (AGPL): built, never imported or linked.
$(BIN_DIR)/minio:
	@mkdir -p $(BIN_DIR)
	@echo "building MinIO $(MINIO_VERSION) into $(BIN_DIR) (several minutes, once per machine)"
	cd $(TOOLS_DIR) && GOBIN=$(BIN_DIR) GOFLAGS=-mod=mod $(GO) install github.com/minio/minio@$(MINIO_VERSION)

$(BIN_DIR)/versitygw:
	@mkdir -p $(BIN_DIR)
	@echo "building versitygw $(VERSITYGW_VERSION) into $(BIN_DIR) (a few minutes, once per machine)"
	cd $(TOOLS_DIR) && GOBIN=$(BIN_DIR) GOFLAGS=-mod=mod $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

$(TOOLS_DIR)/node_modules/.bin/azurite-blob:
	@mkdir -p $(TOOLS_DIR)
	@command -v npm >/dev/null || { echo "npm is needed for Azurite: apt-get install -y nodejs npm"; exit 1; }
	cd $(TOOLS_DIR) && npm install --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION)

verify:
	$(GO) test -race -count=1 -timeout 80m -tags verify ./...
	@# The protocol checker's deep scopes: larger state bounds, 10,000 random
	@# walks; no race detector, so it explores about eight times as many states.
	SHARDFENCE_VERIFY=deep $(GO) test -count=1 -timeout 80m -v -run 'TestWritePath|TestClaims|TestRecovery|TestRandomWalks' ./verify/

clean:
	rm -rf bin data
