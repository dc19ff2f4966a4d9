package cli_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/internal/redistest"
)

// TestReadFromReplicas: serve --redis-read-from-replicas on a Cluster of 3
// masters with a replica each sends peeks to the replicas too and every add
// to the masters; without a Cluster the flag is refused, naming it.
func TestReadFromReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster")
	}
	code, msg := refused(t, nil, "--redis", "redis://127.0.0.1:1", "--redis-read-from-replicas")
	if code == 0 || !strings.Contains(msg, "--redis-read-from-replicas") || !strings.Contains(msg, "Redis Cluster") || !strings.Contains(msg, "Sentinel") {
		t.Errorf("--redis-read-from-replicas with --redis: exit %d, %q; want a refusal naming the flag", code, msg)
	}

	cl := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	// A store timeout of a minute: a peek cut on a loaded machine would
	// make go-redis leave its node out of reads for 15 s
	// (FailingTimeoutSeconds), and the replicas might get none.
	conf := writeFile(t, "floodgate.yaml", "policies:\n  api: \"fixed_window 1000/1h align first\"\nstore:\n  timeout: 1m\n")
	s := startServe(t, nil, "--config", conf, "--redis-cluster", strings.Join(cl.Addrs, ","), "--redis-read-from-replicas")

	calls := func(n *redistest.Server, cmd string) int64 { return n.Calls(t, cmd) }
	post := func(path, key string) int {
		t.Helper()
		res, err := http.Post("http://"+s.http+path, "application/json", strings.NewReader(`{"policy":"api","key":"`+key+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(b), `"degraded":true`) {
			t.Errorf("%s %s: a degraded answer (a store call failed): %s", path, key, b)
		}
		return res.StatusCode
	}
	keys := make([]string, 30) // on every master
	for i := range keys {
		keys[i] = fmt.Sprintf("user%d", i)
		if c := post("/v1/check", keys[i]); c != http.StatusOK {
			t.Fatalf("check %s: %d", keys[i], c)
		}
	}
	// The replicas get the function library from their masters: wait for it.
	for i := range cl.Nodes {
		r := cl.Replicas[i][0]
		deadline := time.Now().Add(30 * time.Second)
		for {
			libs, err := r.Do(t, "FUNCTION", "LIST")
			if err != nil {
				t.Fatal(err)
			}
			if len(libs.([]any)) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s has no function library after 30 s", r.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for range 4 {
		for _, k := range keys {
			if c := post("/v1/peek", k); c != http.StatusOK {
				t.Fatalf("peek %s: %d", k, c)
			}
		}
	}
	var onReplicas, writesOnReplicas int64
	for i, m := range cl.Nodes {
		r := cl.Replicas[i][0]
		t.Logf("master %s: fcall %d, fcall_ro %d; replica %s: fcall %d, fcall_ro %d", m.Addr, calls(m, "fcall"), calls(m, "fcall_ro"), r.Addr, calls(r, "fcall"), calls(r, "fcall_ro"))
		onReplicas += calls(r, "fcall_ro")
		writesOnReplicas += calls(r, "fcall")
	}
	// 120 peeks, each to the master or the replica of its slot at random:
	// none on a replica has probability 2^-120.
	if onReplicas == 0 {
		t.Error("no peek reached a replica")
	}
	if writesOnReplicas != 0 {
		t.Errorf("%d adds reached a replica", writesOnReplicas)
	}
}

// TestReadFromSentinelReplicas: serve --redis-read-from-replicas behind
// Sentinel sends peeks to the master's replica too and every add to the
// master, and still decides an atomic batch over keys on different slots
// (one master holds them all); also over TLS, where the sentinels name
// loopback addresses, which go-redis's cluster client keeps without their
// host.
func TestReadFromSentinelReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis Sentinel")
	}
	// A store timeout of a minute, as in TestReadFromReplicas.
	const policies = "policies:\n  api: \"fixed_window 1000/1h align first\"\nstore:\n  timeout: 1m\n"
	t.Run("plain", func(t *testing.T) {
		sn := redistest.StartSentinel(t)
		conf := writeFile(t, "floodgate.yaml", policies)
		sentinelReplicaReads(t, sn, "--config", conf, "--redis-sentinel", sn.MasterName+"@"+strings.Join(sn.Addrs, ","))
	})
	t.Run("TLS", func(t *testing.T) {
		certs := redistest.NewCerts(t)
		sn := redistest.StartSentinel(t, redistest.WithSentinelTLS(certs))
		conf := writeFile(t, "floodgate.yaml", policies+"  tls: {ca_file: "+certs.CAFile+"}\n")
		var addrs []string
		for _, a := range sn.TLSAddrs {
			addrs = append(addrs, "rediss://"+a)
		}
		sentinelReplicaReads(t, sn, "--config", conf, "--redis-sentinel", sn.MasterName+"@"+strings.Join(addrs, ","))
	})
}

// sentinelReplicaReads is a case of TestReadFromSentinelReplicas: serve
// started with args and --redis-read-from-replicas.
func sentinelReplicaReads(t *testing.T, sn *redistest.Sentinel, args ...string) {
	s := startServe(t, nil, append(args, "--redis-read-from-replicas")...)

	calls := func(n *redistest.Server, cmd string) int64 { return n.Calls(t, cmd) }
	post := func(path, body string) (int, string) {
		t.Helper()
		res, err := http.Post("http://"+s.http+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if strings.Contains(string(b), `"degraded":true`) {
			t.Errorf("%s %s: a degraded answer (a store call failed): %s", path, body, b)
		}
		return res.StatusCode, string(b)
	}
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("user%d", i)
		if c, body := post("/v1/check", `{"policy":"api","key":"`+keys[i]+`"}`); c != http.StatusOK {
			t.Fatalf("check %s: %d %s", keys[i], c, body)
		}
	}
	// Keys "a" and "b" are on slots 15495 and 3300 (their hash tags).
	if c, body := post("/v1/check", `{"atomic":true,"requests":[{"policy":"api","key":"a"},{"policy":"api","key":"b"}]}`); c != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("an atomic batch over two slots: %d %s; want both allowed", c, body)
	}
	// The replica gets the function library from the master: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		libs, err := sn.Replica.Do(t, "FUNCTION", "LIST")
		if err != nil {
			t.Fatal(err)
		}
		if len(libs.([]any)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s has no function library after 30 s", sn.Replica.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 4 {
		for _, k := range keys {
			if c, body := post("/v1/peek", `{"policy":"api","key":"`+k+`"}`); c != http.StatusOK {
				t.Fatalf("peek %s: %d %s", k, c, body)
			}
		}
	}
	t.Logf("master: fcall %d, fcall_ro %d; replica: fcall %d, fcall_ro %d", calls(sn.Master, "fcall"), calls(sn.Master, "fcall_ro"), calls(sn.Replica, "fcall"), calls(sn.Replica, "fcall_ro"))
	// 40 peeks, each to the master or the replica at random: none on the
	// replica has probability 2^-40.
	if calls(sn.Replica, "fcall_ro") == 0 {
		t.Error("no peek reached the replica")
	}
	if n := calls(sn.Replica, "fcall"); n != 0 {
		t.Errorf("%d adds reached the replica", n)
	}
}
