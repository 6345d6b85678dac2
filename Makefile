# streamwal — build, test and lint with nothing installed but Go.
# Tools are pinned and installed into ./bin by the targets that need them.

GO          ?= go
BIN         := $(CURDIR)/bin
PKGS        := ./...
TEST_FLAGS  ?= -race -timeout 15m
BENCH_TIME  ?= 1x

MOCKERY_VERSION     := v3.9.1
STATICCHECK_VERSION := v0.8.2
BUF_VERSION         := v1.75.0
PROTOC_GEN_GO       := v1.36.12
PROTOC_GEN_CONNECT  := v1.21.1
# versitygw: a real S3 server the s3 backend's tests run against (internal/s3test.Versity);
# v1.8.0 is the first whose conditional PUTs are atomic. A tool, not a module dependency.
VERSITYGW_VERSION   := v1.8.0

MOCKERY     := $(BIN)/mockery-$(MOCKERY_VERSION)
STATICCHECK := $(BIN)/staticcheck-$(STATICCHECK_VERSION)
GENTOOLS    := $(BIN)/gen-$(BUF_VERSION)-$(PROTOC_GEN_GO)-$(PROTOC_GEN_CONNECT)
VERSITYGW   := $(BIN)/versitygw-$(VERSITYGW_VERSION)

.PHONY: all run build test versitygw lint mocks mocks-check generate generate-check bench tidy-check fmt-check vet staticcheck clean

all: build test lint

## run: the main job of a node on the embedded default (local) backend
run:
	$(GO) run ./cmd/walbench -dir ./streamwal-data

build:
	$(GO) build $(PKGS)

## test: every test with the race detector (goroutine leaks are checked per package), then
## the one test that trips a data race inside pulsar-client-go, without it (see its file).
## The s3 tests run versitygw from ./bin (STREAMWAL_VERSITYGW), built first.
test: $(VERSITYGW)
	STREAMWAL_VERSITYGW=$(VERSITYGW) $(GO) test $(TEST_FLAGS) $(PKGS)
	$(GO) test -timeout 5m -run '^TestFaultDroppedConnections$$' ./walimpls/impls/pulsar/

## lint: vet, gofmt, staticcheck, go.mod tidiness, mocks and generated API code up to date
lint: vet fmt-check staticcheck tidy-check mocks-check generate-check

vet:
	$(GO) vet $(PKGS)
	cd bench && $(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

staticcheck: $(STATICCHECK)
	$(STATICCHECK) $(PKGS)

tidy-check:
	@cp go.mod go.sum $(BIN)/ 2>/dev/null || { mkdir -p $(BIN) && cp go.mod go.sum $(BIN)/; }
	@$(GO) mod tidy
	@if ! git diff --quiet -- go.mod go.sum; then \
		echo "go.mod/go.sum are not tidy:"; git --no-pager diff -- go.mod go.sum; \
		cp $(BIN)/go.mod $(BIN)/go.sum .; exit 1; fi

## mocks: regenerate the mockery mocks under mocks/
mocks: $(MOCKERY)
	$(MOCKERY)

mocks-check: mocks
	@if [ -n "$$(git status --porcelain -- mocks)" ]; then \
		echo "committed mocks are stale; run make mocks and commit:"; git status --short -- mocks; exit 1; fi

## generate: the node API's Go code (api/) from proto/, with pinned buf and plugins
generate: $(GENTOOLS)/buf
	PATH=$(GENTOOLS):$$PATH $(GENTOOLS)/buf lint
	PATH=$(GENTOOLS):$$PATH $(GENTOOLS)/buf generate

generate-check: generate
	@if [ -n "$$(git status --porcelain -- api)" ]; then \
		echo "committed api/ code is stale; run make generate and commit:"; git status --short -- api; exit 1; fi

## bench: a short run of every benchmark (BENCH_TIME=2s for real figures)
bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCH_TIME) $(PKGS)

$(MOCKERY):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/vektra/mockery/v3@$(MOCKERY_VERSION)
	@mv $(BIN)/mockery $@

$(GENTOOLS)/buf:
	@mkdir -p $(GENTOOLS)
	GOBIN=$(GENTOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	GOBIN=$(GENTOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO)
	GOBIN=$(GENTOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT)

## versitygw: the pinned versitygw binary in ./bin (about a minute to build on 2 cores)
versitygw: $(VERSITYGW)

$(VERSITYGW):
	@mkdir -p $(BIN)
	CGO_ENABLED=0 GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	@mv $(BIN)/versitygw $@

$(STATICCHECK):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@mv $(BIN)/staticcheck $@

## bench-table: the adaptor's cost table (adaptor ÷ raw backend), medians of COUNT runs
.PHONY: bench-table
bench-table:
	scripts/adaptor-table.sh

## release-check: module verified, nothing outside the repository, make lint, make test
.PHONY: release-check
release-check:
	scripts/release-check.sh

## interop: kcat and kafkajs read the kafka backend's records on a test broker, and a kafkajs
## producer fences a streamwal writer (installs kcat and kafkajs: not part of make test)
.PHONY: interop
interop:
	scripts/interop.sh

clean:
	rm -rf $(BIN)

## bench-compare: streamwal's local backend against pebble's record.LogWriter, etcd's WAL,
## tidwall/wal and raw write+fdatasync, in the nested module bench/ (see bench/README.md).
## A short run; BENCH_COMPARE_N=20000x BENCH_COMPARE_SCAN=3x and no -short for real figures.
BENCH_COMPARE_N     ?= 2000x
BENCH_COMPARE_SCAN  ?= 1x
BENCH_COMPARE_FLAGS ?= -short
.PHONY: bench-compare
bench-compare:
	cd bench && $(GO) test -run '^$$' -bench 'SyncAlways|Channels|SyncNone' -benchtime $(BENCH_COMPARE_N) $(BENCH_COMPARE_FLAGS) .
	cd bench && $(GO) test -run '^$$' -bench 'Scan' -benchtime $(BENCH_COMPARE_SCAN) $(BENCH_COMPARE_FLAGS) .
bench: bench-compare
