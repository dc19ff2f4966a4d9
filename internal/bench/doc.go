// Package bench is the engine of `floodgate bench`, the load generator:
// workers that send requests to a Target (Redis through redisstore, or a
// running floodgate serve over HTTP or gRPC), a latency histogram, a
// progress display, and the accuracy of what the target admitted against
// what SPEC.md allows. internal/cli/bench.go turns flags into a Config;
// docs/bench.md is the manual.
//
// # Workload
//
// Concurrency workers share the run. In closed loop (Rate 0) each worker
// sends its next request when the previous one is answered, and latency is
// the time from sending to the answer. In open loop (Rate > 0) arrival i is
// scheduled at i/Rate seconds after the start whatever the target does; a
// free worker claims the next arrival, waits for its time and sends it,
// and latency runs from the scheduled time, not from the moment it was
// sent. When the target is slower than Rate the arrivals queue and the
// latency of each includes its wait: coordinated omission, which a closed
// loop suffers by construction, cannot hide a saturated target. Arrivals
// still due when the run ends are counted as unsent.
//
// Keys are KeyPrefix-0 … KeyPrefix-(Keys−1), a fresh prefix per run so that
// every key starts with no state. With PerWorker each worker has a key of
// its own (the seed's "random tokens per worker"); Uniform and Zipf pick
// each request's key among Keys.
//
// # Latency histogram
//
// Histogram is written here rather than taken from HdrHistogram/hdrhistogram-go:
// the whole of what is needed is 100 lines (log-linear buckets, a
// quantile walk, a merge), each worker records into its own histogram with
// atomic counters so that the progress display reads them while the run
// goes on without locks (hdrhistogram-go is not safe for concurrent use),
// and the module keeps no dependency for it. Buckets are exact below
// 1,024 ns and at most 1/512 of their values wide above (about three
// significant digits, as HdrHistogram's default); a quantile is reported
// as the highest value of its bucket, capped by the exact maximum.
//
// # Accuracy
//
// The target applies one policy to every key, and every key starts empty.
// The ideal is what an exact limiter admits for the same requests at the
// same times. The bench finds it by replaying each key's answers through
// the policy's exact twin, the step functions of internal/algo that every
// store is checked against. Of each request it knows only that the
// limiter decided it somewhere in its span, from its send to its answer
// (widened by 2 µs on each side for the two clocks' truncation), and that
// requests in flight together on a key were decided in some order; it
// gives the limiter the benefit of that doubt. Two guided twins replay
// every answer as the limiter gave it, each judging one kind of answer:
//
//   - The early twin replays each answer at the earliest moment of its
//     span at which the policy agrees with it, so its state is never
//     fuller than the limiter's was. It judges admissions: one it cannot
//     agree with at any moment of its span is over-admission. It then
//     records nothing, so that each later admission is judged against
//     what SPEC.md allows, not against the limiter's excess.
//   - The late twin replays each answer as late as the spans of the key's
//     other requests allow, so its state is never emptier than the
//     limiter's. It judges denials: one it cannot agree with is
//     under-admission, and it records that request as admitted, so that an
//     under-admission counts what an exact limiter would have admitted,
//     no more.
//
// Among overlapping requests, the early twin replays first the one
// answered first; the late twin the one it agrees with at the earliest
// moment. Denials are recorded only under a policy that counts them. Per
// key, over(k) is the cost the early twin could not agree with and
// under(k) the cost the late twin could not, and
//
//	ideal(k) = admitted(k) − over(k) + under(k)
//	accuracy = Σ admitted(k) / Σ ideal(k)
//
// An exact limiter scores 1.000 whatever the demand. Over- and
// under-admission are summed per key, so one key's deficit never hides
// another's excess. Requests that failed, and answers the service's
// failure policy made (degraded), go to neither side and make the figures
// approximate (the report says so).
//
// A known limit: keys with one request in flight at a time (the default,
// a key per worker) are judged exactly. When several requests are in
// flight together on one key (--keys smaller than --concurrency), the
// twins may pick an order the limiter did not take, and an exact limiter
// can then show a few units of over- or under-admission. Rarely, the same
// happens with one request in flight per key under token_bucket and
// fixed_window align first, whose state lives from the request that
// created it: placing that request earlier (or later) than the limiter
// did moves the state's expiry, so neither twin stays on its side of the
// limiter there. The verdict of over-admission (Accuracy.Over, exit
// status 4) therefore rests on the bound below alone, which never accuses
// an exact limiter.
//
// When demand exceeds the limit throughout, the ideal reaches a closed
// form, Bound: the most SPEC.md lets one key admit, from no state,
// between its first request's send (first) and its last answer (last),
// span = last − first, in µs, for requests of cost c (bounds count whole
// requests, k = ⌊max/c⌋ of them where max is the quota):
//
//	fixed_window (epoch)   k · (⌊last/W⌋ − ⌊first/W⌋ + 1)           windows touched
//	fixed_window (first)   k · (⌊span/W⌋ + 1)                       windows opened back to back
//	sliding_window         per limit k · g, g = 1, or when first's bucket expiry
//	                       e = ⌊first/R⌋·R + W ≤ last, g = 2 + ⌊(last − e)/(⌊W/R⌋·R)⌋
//	                       (a generation of k per bucket expiry); the least over limits
//	sliding_log            k · (⌊span/I⌋ + 1) with no min_interval m; with m:
//	                       ⌊span/m⌋ + 1 when m·k ≥ I, else k·⌊span/I⌋ + min(k, ⌊(span mod I)/m⌋ + 1)
//	token_bucket           n·⌊(B·W + (L−B)·(W−1)) / (c·W)⌋ + ⌊(B·W + (L−B)·(span mod W)) / (c·W)⌋,
//	                       n = ⌊span/W⌋ full bucket lifetimes; 0 when c > B
//	gcra                   ⌊(span·count + B·period) / (c·period)⌋; 0 when c > B
//	ar1                    ⌊(max + s·max·(1 − 1/d)) / c⌋ per limit, s = slots from first to last;
//	                       the least over limits (a bound, not always reached)
//
// times c. count_denied can only lower what passes, so the bound ignores
// it: a client hammering a sliding_log (count_denied by default) gets less
// than the bound, and exactly its ideal. The report gives the bound beside
// the ideal, and admitted cost above the bound as over-admission that no
// uncertainty about timing explains.
//
// The twins read this machine's clock, and the limiter its own (Redis's
// TIME, or the service's): where they disagree, epoch-aligned windows
// shift, and a few requests near a window's edge can be counted on the
// wrong side. On one machine they agree.
package bench
