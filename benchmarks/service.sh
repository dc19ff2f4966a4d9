#!/usr/bin/env bash
# service.sh: floodgate serve under floodgate bench, for BENCHMARKS.md's
# "floodgate bench" section.
#
#   benchmarks/service.sh OUTDIR
#
# Builds floodgate, starts a private redis-server (free port, no
# persistence) and floodgate serve on the memory store and on that Redis,
# and loads each over HTTP and gRPC with floodgate bench: 1 hot key and
# 100,000 keys, closed loop, then open loop at OPEN_LOW and OPEN_HIGH
# arrivals per second (below and above the capacity of a 2-core machine).
# Then the saturating closed loop of issue 12: SATURATE clients (256) over
# HTTP on 1 hot key against floodgate serve on that Redis, with batching on
# and off (the defaults otherwise: store.timeout 50ms, failure.mode open),
# SAT_PASSES interleaved passes of SAT_DURATION: the degraded (fail-open)
# answers, the backpressure answers and the bench's over-admission count.
# Writes OUTDIR/service.json (one bench report per line, with its command)
# and OUTDIR/service.md (the tables). Everything it started is stopped on
# exit.
#
# Knobs (environment): DURATION (10s per run), CONCURRENCY (16, closed
# loop), OPEN_LOW (2000), OPEN_HIGH (20000), OPEN_WORKERS (256),
# STORES ("memory redis"), TARGETS ("http grpc"), SATURATE (256; 0 skips
# the saturating loop), SAT_PASSES (3), SAT_DURATION (DURATION).
set -euo pipefail

out=${1:?usage: service.sh OUTDIR}
mkdir -p "$out"
DURATION=${DURATION:-10s}
CONCURRENCY=${CONCURRENCY:-16}
OPEN_LOW=${OPEN_LOW:-2000}
OPEN_HIGH=${OPEN_HIGH:-20000}
OPEN_WORKERS=${OPEN_WORKERS:-256}
STORES=${STORES:-memory redis}
TARGETS=${TARGETS:-http grpc}
SATURATE=${SATURATE:-256}
SAT_PASSES=${SAT_PASSES:-3}
SAT_DURATION=${SAT_DURATION:-$DURATION}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
fg=$work/floodgate
(cd "$root" && go build -o "$fg" ./cmd/floodgate)

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -f "$work/redis.pid" ] && kill "$(cat "$work/redis.pid")" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$work/config"
cat > "$work/config/floodgate.yaml" <<'YAML'
policies:
  load: "gcra 1000/1s burst 100"
YAML
cat > "$work/config/edge.yaml" <<'YAML'
domain: edge
descriptors:
  - key: user
    rate_limit: {policy: load}
YAML

: > "$out/service.json"
for store in $STORES; do
	args=()
	if [ "$store" = redis ]; then
		rport=$(freeport)
		redis-server --port "$rport" --save '' --appendonly no --daemonize yes \
			--pidfile "$work/redis.pid" --logfile "$work/redis.log"
		sleep 0.5
		args=(--redis "redis://127.0.0.1:$rport")
		stats=(--redis-stats -p "$rport") # what each decision cost Redis, from its INFO
	else
		stats=()
	fi
	hport=$(freeport); gport=$(freeport)
	"$fg" serve --config "$work/config" --http "127.0.0.1:$hport" --grpc "127.0.0.1:$gport" "${args[@]}" \
		>"$work/serve-$store.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 50); do grep -qs "floodgate serving" "$work/serve-$store.log" && break; sleep 0.1; done
	for target in $TARGETS; do
		if [ "$target" = http ]; then
			t=(--target http --url "127.0.0.1:$hport" --policy-name load)
		else
			t=(--target grpc --addr "127.0.0.1:$gport" --url "127.0.0.1:$hport" --domain edge --descriptor user)
		fi
		for keys in 1 100000; do
			for mode in closed low high; do
				case $mode in
				closed) m=(--concurrency "$CONCURRENCY") ;;
				low) m=(--concurrency "$OPEN_WORKERS" --rate "$OPEN_LOW") ;;
				high) m=(--concurrency "$OPEN_WORKERS" --rate "$OPEN_HIGH") ;;
				esac
				cmd=(floodgate bench "${t[@]}" --keys "$keys" "${m[@]}" --duration "$DURATION" "${stats[@]}" --json)
				echo "store=$store ${cmd[*]}" >&2
				"$fg" bench "${t[@]}" --keys "$keys" "${m[@]}" --duration "$DURATION" "${stats[@]}" --json --progress off \
					| jq -c --arg store "$store" --arg cmd "${cmd[*]}" '{store: $store, cmd: $cmd, report: .}' \
					>> "$out/service.json" || true
			done
		done
	done
	kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
	if [ "$store" = redis ]; then kill "$(cat "$work/redis.pid")"; rm -f "$work/redis.pid"; fi
done

: > "$out/saturate.json"
if [ "$SATURATE" -gt 0 ]; then
	rport=$(freeport)
	redis-server --port "$rport" --save '' --appendonly no --daemonize yes \
		--pidfile "$work/redis.pid" --logfile "$work/redis.log"
	sleep 0.5
	ports=()
	for batching in true false; do
		mkdir -p "$work/sat-$batching"
		cp "$work/config/floodgate.yaml" "$work/sat-$batching/"
		printf 'store:\n  batching: %s\n' "$batching" >> "$work/sat-$batching/floodgate.yaml"
		hport=$(freeport)
		"$fg" serve --config "$work/sat-$batching" --http "127.0.0.1:$hport" --grpc "127.0.0.1:$(freeport)" \
			--redis "redis://127.0.0.1:$rport" >"$work/serve-sat-$batching.log" 2>&1 &
		pids+=($!)
		for _ in $(seq 50); do grep -qs "floodgate serving" "$work/serve-sat-$batching.log" && break; sleep 0.1; done
		ports+=("$hport")
	done
	for pass in $(seq "$SAT_PASSES"); do
		i=0
		for batching in true false; do
			hport=${ports[$i]}; i=$((i + 1))
			cmd=(floodgate bench --target http --url "127.0.0.1:$hport" --policy-name load --keys 1 --concurrency "$SATURATE" --duration "$SAT_DURATION" --redis-stats -p "$rport" --json)
			echo "saturate pass $pass batching=$batching ${cmd[*]}" >&2
			"$fg" bench --target http --url "127.0.0.1:$hport" --policy-name load --keys 1 --concurrency "$SATURATE" \
				--duration "$SAT_DURATION" --redis-stats -p "$rport" --json --progress off \
				| jq -c --arg b "$batching" --arg pass "$pass" --arg cmd "${cmd[*]}" '{batching: $b, pass: $pass, cmd: $cmd, report: .}' \
				>> "$out/saturate.json" || true
		done
	done
	kill "$(cat "$work/redis.pid")"; rm -f "$work/redis.pid"
fi
{
	echo "| store | target | keys | loop | decisions/s | p50 | p99 | p99.9 | max | unsent | degraded | backpressure | accuracy | Redis CPU µs/decision |"
	echo "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	jq -r '.report as $r | [ .store, $r.target.kind, ($r.workload.keys|tostring),
		(if $r.workload.mode == "open" then "open \($r.workload.rate)/s" else "closed \($r.workload.concurrency)" end),
		($r.decisions_per_s|floor|tostring),
		(($r.latency_us.p50/10|round)/100|tostring) + " ms", (($r.latency_us.p99/10|round)/100|tostring) + " ms", (($r.latency_us.p999/10|round)/100|tostring) + " ms", (($r.latency_us.max/10|round)/100|tostring) + " ms",
		($r.unsent|tostring), ($r.degraded|tostring), ($r.backpressure|tostring),
		(if $r.accuracy.ratio == null then "n/a" else ($r.accuracy.ratio*1000|round/1000|tostring) end),
		(if $r.redis == null then "n/a" else ($r.redis.cpu_us_per_decision|tostring) end)
	] | "| " + join(" | ") + " |"' "$out/service.json"
	echo
	echo "Commands (floodgate serve --config benchmarks' policies: load = gcra 1000/1s burst 100; domain edge, descriptor user):"
	echo
	jq -r '"    " + .store + ": " + .cmd' "$out/service.json"
	if [ -s "$out/saturate.json" ]; then
		echo
		echo "The saturating closed loop: $SATURATE clients, HTTP, 1 hot key, floodgate serve on Redis (store.timeout 50ms, failure.mode open):"
		echo
		echo "| pass | batching | decisions/s | degraded (fail-open) | backpressure | errors | p50 | p99 | beyond the bound | over-admitted (twin estimate) | Redis CPU µs/decision | Redis reads/decision |"
		echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
		jq -r '.report as $r | [ .pass, .batching, ($r.decisions_per_s|floor|tostring),
			($r.degraded|tostring), ($r.backpressure|tostring), ($r.errors|tostring),
			(($r.latency_us.p50/10|round)/100|tostring) + " ms", (($r.latency_us.p99/10|round)/100|tostring) + " ms",
			(if $r.accuracy == null then "n/a" else ($r.accuracy.beyond_bound|tostring) end),
			(if $r.accuracy == null then "n/a" else ($r.accuracy.over_admitted|tostring) end),
			(if $r.redis == null then "n/a" else ($r.redis.cpu_us_per_decision|tostring) end),
			(if $r.redis == null or $r.redis.reads_per_decision == null then "n/a" else ($r.redis.reads_per_decision|tostring) end)
		] | "| " + join(" | ") + " |"' "$out/saturate.json"
		echo
		jq -r '"    batching " + .batching + ": " + .cmd' "$out/saturate.json" | sort -u
	fi
} > "$out/service.md"
echo "wrote $out/service.md" >&2
