package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/internal/redistest"
)

// failoverLoad drives floodgate serve's /v1/check with exhausted keys of
// policy "fo" (gcra 5/1h burst 5, which no local cache answers) while a
// Redis master fails over, and records every answer.
type failoverLoad struct {
	t      *testing.T
	base   string
	client *http.Client
	logs   *syncBuffer

	mu       sync.Mutex
	events   []failoverEvent
	errs     int
	firstErr error
	stop     chan struct{}
	halted   sync.Once
	wg       sync.WaitGroup
}

// failoverEvent is one answer. at is when its request was sent, not when
// the answer came: a goroutine stalled after the answer (seconds, on a
// loaded machine) cannot move the answer later than the service gave it.
type failoverEvent struct {
	at                time.Time
	key               string
	allowed, degraded bool
}

// failoverPolicy is the test's configuration but for the store. The
// store timeout is long enough that a busy machine (the race detector on
// 2 shared cores, the suite run twice at once: any goroutine may stall
// for seconds) never degrades a healthy master's answer by time alone:
// a dead master's calls fail at once (its port refuses connections), so
// the timeout does not slow the failover. The overload queue waits as
// long: each node has its own bound on calls in flight, but a request
// whose items span masters waits for the dead one's share, which holds
// its places up to the store timeout.
const failoverPolicy = `policies:
  fo: "gcra 5/1h burst 5"
failure:
  mode: open
overload:
  queue_wait: 30s
`
const failoverTimeout = "  timeout: 30s\n" // appended to the store section

// recoveryLimit bounds the wait for the failed master's keys to be
// decided by Redis again after the promotion. It is a hang check, not a
// latency bound: the client re-reads the slot map (or asks the sentinels)
// when calls fail and twice a second, so recovery takes well under a
// second on an idle machine; a loaded one adds seconds, never this.
const recoveryLimit = 30 * time.Second

func newFailoverLoad(t *testing.T, config string) *failoverLoad {
	path := writeFile(t, "floodgate.yaml", failoverPolicy+config+failoverTimeout)
	addr, logs := servingLogs(t, nil, "--config", path)
	l := &failoverLoad{
		t: t, base: "http://" + addr, logs: logs,
		// Above the store timeout and the queue wait: only a hang fails.
		client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		stop:   make(chan struct{}),
	}
	t.Cleanup(l.halt) // before the service stops, should the test end early
	return l
}

func (l *failoverLoad) check(key string) (failoverEvent, error) {
	body, _ := json.Marshal(map[string]string{"policy": "fo", "key": key})
	sent := time.Now()
	res, err := l.client.Post(l.base+"/v1/check", "application/json", bytes.NewReader(body))
	if err != nil {
		return failoverEvent{}, err
	}
	defer res.Body.Close()
	var out struct {
		Allowed   bool
		Decisions []struct{ Degraded bool }
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || len(out.Decisions) != 1 {
		return failoverEvent{}, fmt.Errorf("HTTP %d: %v", res.StatusCode, err)
	}
	return failoverEvent{sent, key, out.Allowed, out.Decisions[0].Degraded}, nil
}

// exhaust spends every key's 5 requests, checking that Redis decided each.
func (l *failoverLoad) exhaust(keys []string) {
	for _, k := range keys {
		for i := range 6 {
			e, err := l.check(k)
			if err != nil {
				l.t.Fatal(err)
			}
			if e.degraded || e.allowed != (i < 5) {
				l.t.Fatalf("key %s, request %d before the failover: %+v", k, i+1, e)
			}
		}
	}
}

// start sends requests for keys from 8 goroutines until finish.
func (l *failoverLoad) start(keys []string) {
	for g := range 8 {
		l.wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				time.Sleep(time.Millisecond) // load, not saturation
				e, err := l.check(keys[i%len(keys)])
				l.mu.Lock()
				if err != nil {
					if l.errs == 0 {
						l.firstErr = err
					}
					l.errs++
				} else {
					l.events = append(l.events, e)
				}
				l.mu.Unlock()
			}
		})
	}
}

// halt stops the load and waits for its requests to end.
func (l *failoverLoad) halt() {
	l.halted.Do(func() {
		close(l.stop)
		l.wg.Wait()
	})
}

// answered reports whether every key has had an answer: the load is in
// place.
func (l *failoverLoad) answered(keys []string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, e := range l.events {
		seen[e.key] = true
	}
	for _, k := range keys {
		if !seen[k] {
			return false
		}
	}
	return true
}

// recovered reports whether every key of failed has had an answer from
// Redis to a request sent after the promotion and after every degraded
// answer's request so far: the failed master's keys are decided by Redis
// again.
func (l *failoverLoad) recovered(failed []string, promoted time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	isFailed := map[string]bool{}
	for _, k := range failed {
		isFailed[k] = true
	}
	lastDegraded := promoted
	for _, e := range l.events {
		if isFailed[e.key] && e.degraded && e.at.After(lastDegraded) {
			lastDegraded = e.at
		}
	}
	fromRedis := map[string]bool{}
	for _, e := range l.events {
		if isFailed[e.key] && !e.degraded && e.at.After(lastDegraded) {
			fromRedis[e.key] = true
		}
	}
	return len(fromRedis) == len(isFailed)
}

func (l *failoverLoad) finish() []failoverEvent {
	l.halt()
	if l.errs > 0 {
		l.t.Errorf("%d requests failed, the first: %v", l.errs, l.firstErr)
	}
	return l.events
}

// judge checks the answers: none from Redis admits an exhausted key;
// keys for which failed returns false are never degraded; the others are
// decided by Redis again after their last degraded answer, which came
// within recoveryLimit of the promotion (a hang check). It returns how
// long after the promotion the last degraded answer's request was sent.
func judge(t *testing.T, events []failoverEvent, failed func(key string) bool, killed, promoted time.Time) time.Duration {
	t.Helper()
	var lastDegraded time.Time
	nFailed, nHealthy, degradedHealthy, admitted, afterRecovery := 0, 0, 0, 0, 0
	for _, e := range events {
		if !e.degraded && e.allowed {
			admitted++
		}
		if !failed(e.key) {
			nHealthy++
			if e.degraded {
				degradedHealthy++
			}
			continue
		}
		nFailed++
		if e.degraded && e.at.After(lastDegraded) {
			lastDegraded = e.at
		}
	}
	for _, e := range events {
		if failed(e.key) && e.at.After(lastDegraded) {
			afterRecovery++
		}
	}
	recovery := max(0, lastDegraded.Sub(promoted))
	if os.Getenv("FAILOVER_DEBUG") != "" {
		hist := map[int]int{}
		for _, e := range events {
			if failed(e.key) && e.degraded && e.at.After(promoted) {
				hist[int(e.at.Sub(promoted)/(100*time.Millisecond))]++
			}
		}
		t.Logf("degraded answers after the promotion, per 100 ms: %v", hist)
	}
	t.Logf("%d answers (%d for the failed master's keys, %d for the others); promotion %v after the kill; "+
		"last degraded answer %v after the promotion; %d answers from Redis after it",
		len(events), nFailed, nHealthy, promoted.Sub(killed).Round(time.Millisecond), recovery.Round(time.Millisecond), afterRecovery)
	if degradedHealthy > 0 {
		t.Errorf("%d of %d answers for keys on healthy masters were degraded", degradedHealthy, nHealthy)
	}
	if admitted > 0 {
		t.Errorf("%d answers from Redis admitted an exhausted key", admitted)
	}
	if recovery > recoveryLimit {
		t.Errorf("the failed master's keys were still degraded %v after the promotion, want at most %v", recovery, recoveryLimit)
	}
	if afterRecovery == 0 {
		t.Errorf("no answer for the failed master's keys came from Redis after the promotion")
	}
	return recovery
}

// until polls cond every 20 ms for up to 30 s and returns when it first
// held, or fails the test.
func until(t *testing.T, what string, cond func() bool) time.Time {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return time.Now()
		}
	}
	t.Fatalf("%s: not within 30 s", what)
	return time.Time{}
}

// TestClusterFailover: floodgate serve on a Redis Cluster of 3 masters and
// 3 replicas, under load, when one master is killed (SIGKILL). Every key
// is exhausted first, so that any answer Redis gives is a denial. Keys on
// the two healthy masters are never degraded (the breakers are per
// master); the failed master's keys are decided by Redis again after the
// replica's promotion (the slot map is read again when calls fail, and
// twice a second); no answer from Redis admits an exhausted key.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster and kills a master")
	}
	// Without full coverage required, the healthy masters go on answering
	// while a master is down (with Redis's default, every master answers
	// CLUSTERDOWN from the moment the failed one is marked FAIL until its
	// replica takes over: docs/operations.md, "When the store fails").
	// FAILOVER_FULL_COVERAGE=yes measures Redis's default instead.
	coverage := "no"
	if os.Getenv("FAILOVER_FULL_COVERAGE") == "yes" {
		coverage = "yes"
	}
	cl := redistest.StartCluster(t, 3, redistest.WithReplicas(1), redistest.WithNodeConfig("cluster-require-full-coverage "+coverage))
	l := newFailoverLoad(t, "store:\n  type: redis-cluster\n  addrs: ["+strings.Join(cl.Addrs, ", ")+"]\n")

	owner := func(key string) int {
		reply, err := cl.Nodes[1].Do(t, "CLUSTER", "KEYSLOT", "{"+key+"}")
		if err != nil {
			t.Fatal(err)
		}
		slot, i := int(reply.(int64)), 0
		for j := range cl.Nodes {
			if slot >= j*16384/len(cl.Nodes) {
				i = j
			}
		}
		return i
	}
	const perMaster = 8
	keys := make([][]string, len(cl.Nodes))
	onFailed := map[string]bool{}
	for i := 0; len(keys[0]) < perMaster || len(keys[1]) < perMaster || len(keys[2]) < perMaster; i++ {
		k := fmt.Sprintf("user%d", i)
		if o := owner(k); len(keys[o]) < perMaster {
			keys[o] = append(keys[o], k)
			onFailed[k] = o == 0
		}
	}
	all := slices.Concat(keys...)
	l.exhaust(all)
	for _, m := range cl.Nodes { // the replicas hold every key's state
		// WAIT returns once the replica has acknowledged; its limit, 20 s,
		// only bounds a hang.
		if reply, err := m.Do(t, "WAIT", "1", "20000"); err != nil || reply.(int64) != 1 {
			t.Fatalf("WAIT on %s: %v %v", m.Addr, reply, err)
		}
	}

	l.start(all)
	until(t, "an answer for every key under load", func() bool { return l.answered(all) })
	killed := time.Now()
	cl.Nodes[0].Kill(t)
	promoted := until(t, "the replica's promotion", func() bool {
		reply, err := cl.Replicas[0][0].Do(t, "ROLE")
		return err == nil && fmt.Sprint(reply.([]any)[0]) == "master"
	})
	until(t, "every key of the failed master decided by Redis again", func() bool { return l.recovered(keys[0], promoted) })
	time.Sleep(time.Second) // the load goes on a while: a relapse would show (a stall only shortens this)
	judge(t, l.finish(), func(k string) bool { return onFailed[k] }, killed, promoted)
	l.showFailures()
}

// showFailures logs the service's warnings when the test failed: which
// node failed, and how.
func (l *failoverLoad) showFailures() {
	if !l.t.Failed() {
		return
	}
	for _, line := range strings.Split(l.logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			l.t.Log(line)
		}
	}
}

// TestSentinelFailover: the same through Redis Sentinel (a master, a
// replica, three sentinels with down-after-milliseconds 1000): every key
// lives on the one master, and is decided by Redis again after the
// sentinels name the new master; also when the servers and the sentinels
// each ask for a password of their own, and with replica reads on (go-redis's
// cluster client over the master and its replica, which must find the new
// master too; the load adds only).
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis Sentinel and kills the master")
	}
	for _, c := range []struct {
		name  string
		opts  []redistest.SentinelOption
		store string // more store settings
	}{
		{"no passwords", nil, ""},
		{"passwords", []redistest.SentinelOption{redistest.WithMasterAuth("", "master-secret"), redistest.WithSentinelAuth("", "sentinel-secret")},
			"  password: master-secret\n  sentinel_password: sentinel-secret\n"},
		{"replica reads", nil, "  read_from_replicas: true\n"},
	} {
		t.Run(c.name, func(t *testing.T) { sentinelFailover(t, c.store, c.opts...) })
	}
}

// sentinelFailover is one case of TestSentinelFailover.
func sentinelFailover(t *testing.T, store string, opts ...redistest.SentinelOption) {
	st := redistest.StartSentinel(t, opts...)
	l := newFailoverLoad(t, "store:\n  type: redis-sentinel\n  master: "+st.MasterName+"\n  addrs: ["+strings.Join(st.Addrs, ", ")+"]\n"+store)
	var keys []string
	for i := range 16 {
		keys = append(keys, fmt.Sprintf("user%d", i))
	}
	l.exhaust(keys)
	if reply, err := st.Master.Do(t, "WAIT", "1", "20000"); err != nil || reply.(int64) != 1 { // 20 s: a hang's bound
		t.Fatalf("WAIT: %v %v", reply, err)
	}

	l.start(keys)
	until(t, "an answer for every key under load", func() bool { return l.answered(keys) })
	killed := time.Now()
	st.Master.Kill(t)
	promoted := until(t, "the sentinels naming the replica", func() bool {
		reply, err := st.Sentinels[0].Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", st.MasterName)
		addr, _ := reply.([]any)
		return err == nil && len(addr) == 2 && fmt.Sprint(addr[1]) == fmt.Sprint(st.Replica.Port)
	})
	until(t, "every key decided by Redis again", func() bool { return l.recovered(keys, promoted) })
	time.Sleep(time.Second) // the load goes on a while: a relapse would show (a stall only shortens this)
	judge(t, l.finish(), func(string) bool { return true }, killed, promoted)
	l.showFailures()
}
