# floodgate's build targets. `make test` is what CI runs (.ci/run).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
FUZZTIME ?= 30s

.PHONY: test check redis fuzz bench bench-peers

## test: gofmt and vet, then every test with the race detector, shuffled,
## uncached, with real redis-server processes (installed when missing, and
## required: a Redis test never skips here).
test: check redis
	FLOODGATE_REQUIRE_REDIS=1 $(GO) test -race -shuffle=on -count=1 -json ./... | $(GO) run ./internal/testreport

## redis: install redis-server (Debian's package) when it is not on PATH.
redis:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "redis-server not found: installing it with apt-get"; \
		sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq redis-server >/dev/null; \
		command -v redis-server >/dev/null 2>&1 || { echo "redis-server is still missing after apt-get install"; exit 1; }; \
	fi
	@redis-server --version

## check: gofmt and go vet.
check:
	@unformatted="$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -w needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

## fuzz: run every fuzz target for FUZZTIME each.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParsePolicy$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime $(FUZZTIME) ./internal/algo

## bench: the memory store's benchmarks.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./memstore

## bench-peers: the memory store against in-process peer libraries (benchmarks/ module).
bench-peers:
	cd benchmarks && $(GO) test -run '^$$' -bench . -benchmem .
