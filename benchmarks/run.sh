#!/usr/bin/env bash
# run.sh: the measurement behind BENCHMARKS.md.
#
#   benchmarks/run.sh [OUTDIR]     (default OUTDIR: /tmp)
#
# Builds two test binaries (this module's peer benchmarks and the main
# module's memstore benchmarks) and runs every benchmark leaf (for example
# BenchmarkGCRA/1key/serial/lib=floodgate) on its own, in passes: each pass
# runs every leaf once, so the samples of the libraries of one cell are
# interleaved in time and a burst of load from something else hits one
# sample of each rather than all the samples of one.
#
# The machine should be idle. To keep a busy neighbour out of the numbers,
# each run of a leaf is timed against /proc/stat: if other processes used
# more than MAX_FOREIGN percent (default 15) of the machine's CPU meanwhile,
# the sample is thrown away and the leaf is run again after a pause. The
# log says how often that happened. The estimate is coarse (jiffies, and
# this script's own forks count as foreign): an idle 2-core VM shows 3-12%,
# while one compile job of someone else shows about 50%.
#
# Writes OUTDIR/peers.txt and OUTDIR/memstore.txt (go test -bench output,
# for benchstat) and OUTDIR/samples.log (one line per run of a leaf: kept or
# thrown away, foreign CPU, steal).
#
# Knobs (environment): PEER_PASSES (10), MEM_PASSES (6), BENCHTIME (200ms),
# MAX_FOREIGN (15), MAX_TRIES (20 runs of one sample before giving up),
# FILTER (an extended regexp: run only the leaves whose names match it).
set -euo pipefail

out=${1:-/tmp}
peer_passes=${PEER_PASSES:-10}
mem_passes=${MEM_PASSES:-6}
benchtime=${BENCHTIME:-200ms}
max_foreign=${MAX_FOREIGN:-15}
max_tries=${MAX_TRIES:-20}
filter=${FILTER:-.}

here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$here" && go test -c -o "$bin/peers.test" .)
(cd "$here/.." && go test -c -o "$bin/memstore.test" ./memstore/)

hz=$(getconf CLK_TCK)
ncpu=$(nproc)
: >"$out/samples.log"

# leaves BINARY DIR: the full names of the binary's benchmark leaves, from a
# run of one iteration each, without the -GOMAXPROCS suffix.
leaves() {
	(cd "$2" && "$1" -test.run '^$' -test.bench . -test.benchtime 1x) |
		awk '/^Benchmark/{sub(/-[0-9]+$/, "", $1); print $1}'
}

# pattern NAME: a -test.bench pattern matching exactly the leaf NAME
# (names hold only letters, digits, _ = and -).
pattern() {
	local IFS=/ p="" part
	for part in $1; do
		p+="${p:+/}^${part}\$"
	done
	echo "$p"
}

# sample NAME BINARY DIR OUTFILE: one kept sample of leaf NAME, appended to
# OUTFILE with the header lines of the first sample only.
sample() {
	local name=$1 binary=$2 dir=$3 outfile=$4 tries=0 tmp
	tmp=$(mktemp)
	while :; do
		local b0 b1 s0 s1 t0 t1 cpu foreign steal
		read -r b0 s0 < <(awk '/^cpu /{print $2+$3+$4+$7+$8, $9}' /proc/stat)
		t0=$(date +%s.%N)
		# The benchmark's own CPU time (user+sys): the second line of the
		# times builtin of the subshell that waits for it (written to a file:
		# in a pipe or a command substitution, times would run in a new
		# process that has waited for nothing).
		(cd "$dir" && "$binary" -test.run '^$' -test.bench "$(pattern "$name")" \
			-test.count 1 -test.benchtime "$benchtime" >"$tmp"
			times >"$tmp.times")
		t1=$(date +%s.%N)
		cpu=$(awk 'NR==2{split($1,u,"m");split($2,s,"m");print u[1]*60+u[2]+s[1]*60+s[2]}' "$tmp.times")
		rm -f "$tmp.times"
		read -r b1 s1 < <(awk '/^cpu /{print $2+$3+$4+$7+$8, $9}' /proc/stat)
		if grep -q -e '^--- FAIL' -e '^FAIL' "$tmp"; then
			cat "$tmp" >&2
			echo "$name: benchmark failed" >&2
			exit 1
		fi
		# Foreign CPU: busy time of the machine not spent by the benchmark,
		# as a percent of all cores over the run.
		read -r foreign steal < <(awk -v b=$((b1 - b0)) -v s=$((s1 - s0)) -v hz="$hz" \
			-v c="$cpu" -v t0="$t0" -v t1="$t1" -v n="$ncpu" \
			'BEGIN{w=(t1-t0)*n; f=(b/hz-c)/w*100; if(f<0)f=0; printf "%.1f %.1f\n", f, s/hz/w*100}')
		tries=$((tries + 1))
		if awk -v f="$foreign" -v m="$max_foreign" 'BEGIN{exit !(f<=m)}'; then
			echo "kept    $name foreign=${foreign}% steal=${steal}%" >>"$out/samples.log"
			if [[ -s $outfile ]]; then
				grep '^Benchmark' "$tmp" >>"$outfile"
			else
				grep -v -e '^PASS' -e '^ok' "$tmp" >>"$outfile"
			fi
			rm -f "$tmp"
			return
		fi
		echo "dropped $name foreign=${foreign}% steal=${steal}%" >>"$out/samples.log"
		if ((tries >= max_tries)); then
			echo "$name: $tries samples in a row thrown away: the machine is not idle" >&2
			exit 1
		fi
		sleep 2
	done
}

# run LABEL BINARY DIR OUTFILE PASSES
run() {
	local label=$1 binary=$2 dir=$3 outfile=$4 passes=$5 i name
	local -a names
	((passes > 0)) || return 0
	mapfile -t names < <(leaves "$binary" "$dir" | grep -E -e "$filter" || true)
	: >"$outfile"
	for ((i = 1; i <= passes; i++)); do
		echo "$label: pass $i of $passes (${#names[@]} benchmarks)" >&2
		for name in "${names[@]}"; do
			sample "$name" "$binary" "$dir" "$outfile"
		done
	done
}

run peers "$bin/peers.test" "$here" "$out/peers.txt" "$peer_passes"
run memstore "$bin/memstore.test" "$here/../memstore" "$out/memstore.txt" "$mem_passes"
kept=$(grep -c '^kept' "$out/samples.log" || true)
dropped=$(grep -c '^dropped' "$out/samples.log" || true)
echo "samples kept: $kept, thrown away for foreign load: $dropped" >&2
