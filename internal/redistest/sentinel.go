package redistest

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// A Sentinel is a monitored master with one replica and three sentinels,
// started by StartSentinel. Its fields do not change after StartSentinel
// returns, not even when the sentinels fail over: then ask them for the
// new master.
type Sentinel struct {
	// MasterName is the name the sentinels monitor the master under.
	MasterName string
	// Master is the master as started.
	Master *Server
	// Replica replicates Master.
	Replica *Server
	// Addrs are the sentinels' addresses, in the order of Sentinels.
	Addrs []string
	// Sentinels are the three sentinel processes (redis-server --sentinel).
	Sentinels []*Server
	// TLSAddrs are the sentinels' TLS addresses with WithSentinelTLS, in
	// the order of Sentinels; nil without.
	TLSAddrs []string

	tls bool // the sentinels monitor the master's TLS port
}

// A SentinelOption configures StartSentinel.
type SentinelOption func(*sentinelOptions)

type sentinelOptions struct{ tls *Certs }

// WithSentinelTLS makes the master, the replica and the sentinels listen
// for TLS as well (WithTLS, without client certificates), with
// replication, and the sentinels' own connections to the servers, over
// TLS: the sentinels monitor the master's TLS port, and name TLS ports to
// clients.
func WithSentinelTLS(certs *Certs) SentinelOption {
	return func(o *sentinelOptions) { o.tls = certs }
}

// StartSentinel starts a master, a replica of it, and three sentinels that
// monitor it as "mymaster" with quorum 2, down-after-milliseconds 1000 and
// failover-timeout 10000. It returns once the replica is in sync, and every
// sentinel answers SENTINEL GET-MASTER-ADDR-BY-NAME with the master's
// address, sees it up, and has discovered the replica and the two other
// sentinels, typically 2 to 3 seconds after the call; or it fails the test
// after 15 seconds. t.Cleanup stops every process. It is safe for
// concurrent use.
func StartSentinel(t testing.TB, opts ...SentinelOption) *Sentinel {
	t.Helper()
	var o sentinelOptions
	for _, opt := range opts {
		opt(&o)
	}
	bin := Binary(t)
	sn := &Sentinel{MasterName: "mymaster", tls: o.tls != nil}
	// A full sync starts at once instead of after 5 seconds.
	sn.Master = newServer(t, bin, options{tls: o.tls}).plain()
	sn.Master.directives = append(sn.Master.directives, "repl-diskless-sync-delay 0")
	startAll(t, sn.Master)
	masterPort := strconv.Itoa(sn.Master.Port)
	if sn.tls {
		masterPort = strconv.Itoa(sn.Master.TLSPort)
	}

	sn.Replica = newServer(t, bin, options{tls: o.tls}).plain()
	sn.Replica.directives = append(sn.Replica.directives,
		"repl-diskless-sync-delay 0", // in case it is promoted
		"replicaof 127.0.0.1 "+masterPort)
	startAll(t, sn.Replica)
	// The sentinels find the replica in the master's INFO when they
	// connect; a replica that attached later would take them 10 s to see.
	if err := poll(startTimeout, func() error {
		reply, err := sn.Replica.Do(t, "INFO", "replication")
		info, _ := reply.(string)
		if err == nil && infoField(info, "master_link_status") != "up" {
			err = fmt.Errorf("replica %s: master_link_status:%s", sn.Replica.Addr, infoField(info, "master_link_status"))
		}
		return err
	}); err != nil {
		t.Fatalf("redistest: replica did not sync within %v: %v\n%s", startTimeout, err, sn.Replica.tail())
	}

	for range 3 {
		s := newServer(t, bin, options{args: []string{"--sentinel"}, tls: o.tls})
		s.directives = append(s.directives,
			"sentinel monitor "+sn.MasterName+" 127.0.0.1 "+masterPort+" 2",
			"sentinel down-after-milliseconds "+sn.MasterName+" 1000",
			"sentinel failover-timeout "+sn.MasterName+" 10000",
		)
		sn.Sentinels = append(sn.Sentinels, s)
	}
	startAll(t, sn.Sentinels...)
	for _, s := range sn.Sentinels {
		sn.Addrs = append(sn.Addrs, s.Addr)
		if s.TLSAddr != "" {
			sn.TLSAddrs = append(sn.TLSAddrs, s.TLSAddr)
		}
	}
	var pending *Server // the sentinel last found unsettled
	if err := poll(startTimeout, func() error {
		for _, s := range sn.Sentinels {
			if err := sn.check(s); err != nil {
				pending = s
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("redistest: sentinel %s did not settle within %v: %v\n%s", pending.Addr, startTimeout, err, pending.tail())
	}
	return sn
}

// check reports the first sign that sentinel s does not know the whole
// setup yet.
func (sn *Sentinel) check(s *Server) error {
	reply, err := do(s.Addr, "", "", "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sn.MasterName)
	if err != nil {
		return err
	}
	want := []any{"127.0.0.1", strconv.Itoa(sn.Master.Port)}
	if sn.tls {
		want[1] = strconv.Itoa(sn.Master.TLSPort)
	}
	if addr, _ := reply.([]any); !slices.Equal(addr, want) {
		return fmt.Errorf("master address %v, want %v", reply, want)
	}
	reply, err = do(s.Addr, "", "", "SENTINEL", "MASTER", sn.MasterName)
	if err != nil {
		return err
	}
	fields := map[string]string{}
	kv, _ := reply.([]any)
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		v, _ := kv[i+1].(string)
		fields[k] = v
	}
	if fields["flags"] != "master" || fields["num-slaves"] != "1" || fields["num-other-sentinels"] != "2" {
		return fmt.Errorf("flags=%s num-slaves=%s num-other-sentinels=%s, want master, 1 and 2",
			fields["flags"], fields["num-slaves"], fields["num-other-sentinels"])
	}
	return nil
}
