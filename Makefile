# floodgate's build targets. `make test` is what CI runs (.ci/run).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
FUZZTIME ?= 10s

.PHONY: test check redis browser fuzz bench bench-mem bench-peers bench-envoy release image ship-check

## test: gofmt and vet, then every test with the race detector, shuffled,
## uncached, with real redis-server processes (installed when missing, and
## required: a Redis test never skips here); then the dashboard's test in
## Chromium (the nested module browsertest/, which keeps chromedp out of
## go.mod; Chromium is installed when missing, and required).
test: check redis browser
	FLOODGATE_REQUIRE_REDIS=1 $(GO) test -race -shuffle=on -count=1 -timeout 30m -json ./... | $(GO) run ./internal/testreport
	cd browsertest && FLOODGATE_REQUIRE_REDIS=1 FLOODGATE_REQUIRE_BROWSER=1 $(GO) test -race -count=1 -json ./... | $(GO) run ../internal/testreport

## redis: install redis-server, and redis-cli (whose --cluster reshard the
## tests of slot migrations run), from Debian's packages when they are not
## on PATH (scripts/apt-install.sh: one install at a time, so that two make
## test at once do not collide on dpkg's lock).
redis:
	@scripts/apt-install.sh redis-server redis-server
	@scripts/apt-install.sh redis-tools redis-cli
	@redis-server --version

## browser: install Chromium (Debian's package) when it is not on PATH, for
## the dashboard's browser test.
browser:
	@scripts/apt-install.sh chromium chromium
	@chromium --version 2>/dev/null

## check: gofmt and go vet (the browser test's module too).
check:
	@unformatted="$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -w needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd browsertest && $(GO) vet ./...

## release: static binaries for linux and darwin (amd64, arm64), THIRD_PARTY,
## Debian packages (amd64, arm64) and SHA256SUMS into dist/, reproducibly:
## versions, commit and dates come from git, never the clock
## (scripts/release.sh).
release:
	scripts/release.sh

## image: the container image as an OCI archive, dist/floodgate_image.tar,
## without a container engine (scripts/image.sh); needs make release's files.
image: release
	scripts/image.sh

## ship-check: build what floodgate ships and try it as a user would:
## reproducibility, the .deb in a scratch root, systemd-analyze, the image,
## helm lint and template, promtool, every shipped configuration
## (scripts/ship-check.sh; .ci/run runs it after make test).
ship-check:
	scripts/ship-check.sh

## fuzz: run every fuzz target for FUZZTIME each (10s by default: some
## three minutes in all; FUZZTIME=5m for a real search). Their seed corpora
## are committed under each package's testdata/fuzz/ and run with make test.
## FUZZ_TARGETS lists them as package:target; redisstore's differential
## target needs redis-server.
FUZZ_TARGETS = \
	.:FuzzParsePolicy \
	./internal/algo:FuzzDifferential \
	./config:FuzzParseConfig \
	./transport/httpapi:FuzzDecodeCheck \
	./transport/envoyrls:FuzzShouldRateLimit \
	./transport/envoyrls:FuzzJSON \
	./httplimit:FuzzClientIP \
	./httplimit/luascript:FuzzParseReply \
	./redisstore:FuzzDecode \
	./redisstore:FuzzDifferential
fuzz: redis
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

## bench: regenerate BENCHMARKS.md's comparison tables into BENCH_OUT in one
## run (20-40 minutes on 2 cores; the machine should be idle): memstore
## against in-process peers (benchmarks/run.sh, benchstat), redisstore
## against Redis peers (benchmarks/redisload -mode mem and -mode load), and
## floodgate serve under floodgate bench (benchmarks/service.sh), and floodgate
## serve against envoyproxy/ratelimit (benchmarks/envoyload, 15-20 minutes of
## it). Shorter:
## make bench PEER_PASSES=1 MEM_PASSES=1 BENCHTIME=50ms MAX_FOREIGN=40 LOAD_PASSES=1 LOAD_DURATION=2s CALLS=20000 CALLS_RUNS=1 DURATION=1s ENVOY_PASSES=1 ENVOY_DURATION=1s
## (a check of the plumbing rather than figures, 8.2 minutes on an idle 2-core
## VM: with 50 ms runs, benchmarks/run.sh counts its own process starts as foreign
## load, hence MAX_FOREIGN).
BENCH_OUT ?= bench-out
PEER_PASSES ?= 10
MEM_PASSES ?= 6
BENCHTIME ?= 200ms
LOAD_PASSES ?= 3
LOAD_DURATION ?= 10s
CALLS ?= 100000
CALLS_RUNS ?= 5
DURATION ?= 10s
ENVOY_PASSES ?= 3
ENVOY_DURATION ?= 5s
ENVOY_FLAGS ?=
bench: redis
	mkdir -p $(BENCH_OUT)
	PEER_PASSES=$(PEER_PASSES) MEM_PASSES=$(MEM_PASSES) BENCHTIME=$(BENCHTIME) benchmarks/run.sh $(BENCH_OUT)
	cd benchmarks && $(GO) run golang.org/x/perf/cmd/benchstat@latest -table .name -col /lib $(abspath $(BENCH_OUT))/peers.txt > $(abspath $(BENCH_OUT))/peers.md || echo "benchstat failed: see $(BENCH_OUT)/peers.txt"
	$(GO) run golang.org/x/perf/cmd/benchstat@latest $(BENCH_OUT)/memstore.txt > $(BENCH_OUT)/memstore.md || echo "benchstat failed: see $(BENCH_OUT)/memstore.txt"
	cd benchmarks && $(GO) run ./redisload -mode mem > $(abspath $(BENCH_OUT))/redis-mem.md
	cd benchmarks && $(GO) run ./redisload -mode load -passes $(LOAD_PASSES) -duration $(LOAD_DURATION) > $(abspath $(BENCH_OUT))/redis-load.md
	cd benchmarks && $(GO) run ./redisload -mode calls -calls $(CALLS) -calls-runs $(CALLS_RUNS) > $(abspath $(BENCH_OUT))/redis-calls.md
	DURATION=$(DURATION) benchmarks/service.sh $(BENCH_OUT)
	cd benchmarks && $(GO) run ./envoyload -passes $(ENVOY_PASSES) -duration $(ENVOY_DURATION) $(ENVOY_FLAGS) -out $(abspath $(BENCH_OUT)) > /dev/null
	@echo "tables in $(BENCH_OUT)/: peers.md memstore.md redis-mem.md redis-load.md redis-calls.md service.md envoy.md"

## bench-envoy: floodgate serve against envoyproxy/ratelimit on one private
## redis-server (benchmarks/envoyload; its README section). Writes
## BENCH_OUT/envoy.md (the table), envoy.tsv (every run), envoy.log.
## ENVOY_FLAGS passes more flags, e.g. ENVOY_FLAGS='-contenders ^floodgate -workloads hot'.
bench-envoy: redis
	mkdir -p $(BENCH_OUT)
	cd benchmarks && $(GO) run ./envoyload -passes $(ENVOY_PASSES) -duration $(ENVOY_DURATION) $(ENVOY_FLAGS) -out $(abspath $(BENCH_OUT))

## bench-mem: the memory store's benchmarks alone (fast).
bench-mem:
	$(GO) test -run '^$$' -bench . -benchmem ./memstore

## bench-peers: the memory store against in-process peer libraries (benchmarks/ module).
bench-peers:
	cd benchmarks && $(GO) test -run '^$$' -bench . -benchmem .
