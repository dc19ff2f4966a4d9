package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// A Cluster is a Redis Cluster started by StartCluster: masters, and
// replicas when asked for with WithReplicas. Its fields do not change after
// StartCluster returns.
type Cluster struct {
	// Addrs are the masters' addresses, in the order of Nodes.
	Addrs []string
	// TLSAddrs are the masters' TLS addresses with WithClusterTLS, in the
	// order of Nodes; nil without.
	TLSAddrs []string
	// Nodes are the masters; of the slots split into len(Nodes) equal
	// ranges, Nodes[i] first owns the i-th.
	Nodes []*Server
	// Replicas holds the replicas of each master: Replicas[i] replicate
	// Nodes[i]. It is nil without WithReplicas.
	Replicas [][]*Server
}

// A ClusterOption configures StartCluster.
type ClusterOption func(*clusterOptions)

type clusterOptions struct {
	replicas   int
	directives []string
	tls        *Certs
}

// WithReplicas gives every master n replicas (n ≥ 0), which StartCluster
// attaches with CLUSTER REPLICATE and waits for until each is in sync with
// its master and listed by every node's CLUSTER SLOTS. A client reads from
// them with ClusterOptions.ReadOnly (and RouteRandomly or RouteByLatency).
func WithReplicas(n int) ClusterOption {
	return func(o *clusterOptions) { o.replicas = n }
}

// WithNodeConfig adds configuration directives ("cluster-require-full-coverage
// no") to every node's configuration file.
func WithNodeConfig(directives ...string) ClusterOption {
	return func(o *clusterOptions) { o.directives = append(o.directives, directives...) }
}

// WithClusterTLS makes every node listen for TLS as well (WithTLS, without
// client certificates), with the cluster bus and replication over TLS
// too. A client connected over TLS reads the nodes' TLS ports in CLUSTER
// SLOTS; Cluster.TLSAddrs are the masters' TLS addresses.
func WithClusterTLS(certs *Certs) ClusterOption {
	return func(o *clusterOptions) { o.tls = certs }
}

// StartCluster starts a Redis Cluster of masters nodes (and, with
// WithReplicas, replicas of each), each a server as StartServer makes one
// plus cluster-enabled yes, its nodes.conf in its temporary directory, and
// cluster-node-timeout 2000 (milliseconds). It assigns the slots in equal
// ranges, joins the nodes, and returns once Wait succeeds, typically 2 to
// 3 seconds after the call. t.Cleanup stops every node. It is safe for
// concurrent use.
func StartCluster(t testing.TB, masters int, opts ...ClusterOption) *Cluster {
	t.Helper()
	var o clusterOptions
	for _, opt := range opts {
		opt(&o)
	}
	if masters < 1 || masters > slotCount || o.replicas < 0 {
		t.Fatalf("redistest: StartCluster(%d) with %d replicas each: need 1 to %d masters, replicas ≥ 0", masters, o.replicas, slotCount)
	}
	bin := Binary(t)
	c := &Cluster{}
	node := func() *Server {
		s := newServer(t, bin, options{tls: o.tls}).plain()
		s.bus = true
		if o.tls != nil {
			s.directives = append(s.directives, "tls-cluster yes")
		}
		s.directives = append(s.directives,
			"cluster-enabled yes",
			"cluster-config-file "+quote(filepath.Join(s.dir, "nodes.conf")),
			"cluster-node-timeout 2000",
			"cluster-announce-ip 127.0.0.1", // each node's own view names it as the others do
			"repl-diskless-sync-delay 0",    // a replica's first sync starts at once
			// CLUSTER SLOTS lists a replica once its replication offset is
			// not 0; a master without writes moves it only by its pings of
			// the replicas, every 10 s by default.
			"repl-ping-replica-period 1",
		)
		s.directives = append(s.directives, o.directives...)
		return s
	}
	all := []*Server{}
	for range masters {
		s := node()
		c.Nodes = append(c.Nodes, s)
		all = append(all, s)
	}
	if o.replicas > 0 {
		c.Replicas = make([][]*Server, masters)
		for i := range c.Replicas {
			for range o.replicas {
				s := node()
				c.Replicas[i] = append(c.Replicas[i], s)
				all = append(all, s)
			}
		}
	}
	startAll(t, all...)
	for i, s := range c.Nodes {
		c.Addrs = append(c.Addrs, s.Addr)
		if s.TLSAddr != "" {
			c.TLSAddrs = append(c.TLSAddrs, s.TLSAddr)
		}
		first, last := i*slotCount/masters, (i+1)*slotCount/masters-1
		// Distinct config epochs spare the nodes resolving a collision.
		for _, cmd := range [][]string{
			{"CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i + 1)},
			{"CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)},
		} {
			if _, err := s.Do(t, cmd...); err != nil {
				t.Fatalf("redistest: %v on %s: %v", cmd, s.Addr, err)
			}
		}
	}
	// Every node meets every other: learning of a node through gossip
	// alone can take seconds longer.
	for i, a := range all {
		for _, b := range all[i+1:] {
			port := b.Port
			if b.TLSPort != 0 { // tls-cluster: the bus hangs off the TLS port
				port = b.TLSPort
			}
			if _, err := a.Do(t, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(port)); err != nil {
				t.Fatalf("redistest: CLUSTER MEET %s from %s: %v", b.Addr, a.Addr, err)
			}
		}
	}
	if o.replicas > 0 {
		c.attachReplicas(t)
	}
	c.Wait(t)
	return c
}

// attachReplicas makes each replica replicate its master, once it knows
// the master's node ID, and waits until every replica is in sync.
func (c *Cluster) attachReplicas(t testing.TB) {
	t.Helper()
	for i, m := range c.Nodes {
		id, err := do(m.Addr, "", "", "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", m.Addr, err)
		}
		for _, r := range c.Replicas[i] {
			// The replica must have learnt of the master through the MEET
			// before it can replicate it.
			if err := poll(startTimeout, func() error {
				_, err := do(r.Addr, "", "", "CLUSTER", "REPLICATE", id.(string))
				return err
			}); err != nil {
				t.Fatalf("redistest: CLUSTER REPLICATE %s on %s: %v", m.Addr, r.Addr, err)
			}
		}
	}
	for _, rs := range c.Replicas {
		for _, r := range rs {
			if err := poll(startTimeout, func() error {
				reply, err := do(r.Addr, "", "", "INFO", "replication")
				info, _ := reply.(string)
				if err == nil && infoField(info, "master_link_status") != "up" {
					err = fmt.Errorf("replica %s: master_link_status:%s", r.Addr, infoField(info, "master_link_status"))
				}
				return err
			}); err != nil {
				t.Fatalf("redistest: replica did not sync within %v: %v\n%s", startTimeout, err, r.tail())
			}
		}
	}
}

// all returns the masters, then the replicas.
func (c *Cluster) all() []*Server {
	out := append([]*Server(nil), c.Nodes...)
	for _, rs := range c.Replicas {
		out = append(out, rs...)
	}
	return out
}

// Wait waits until every node (masters and replicas) reports
// cluster_state:ok and knows all the nodes, and every node's CLUSTER SLOTS
// assigns all 16384 slots to the same masters and lists each master's
// replicas, polling for up to 15 seconds; then it fails the test with the
// last discrepancy. Use it after restarting a node. It is safe for
// concurrent use.
func (c *Cluster) Wait(t testing.TB) {
	t.Helper()
	if err := poll(startTimeout, c.check); err != nil {
		t.Fatalf("redistest: cluster %v did not settle within %v: %v", c.Addrs, startTimeout, err)
	}
}

// check reports the first sign that the cluster is not settled.
func (c *Cluster) check() error {
	var first []string // slot owners as the first node sees them
	nodes := c.all()
	for _, s := range nodes {
		reply, err := do(s.Addr, "", "", "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %v", s.Addr, err)
		}
		info, _ := reply.(string)
		if state := infoField(info, "cluster_state"); state != "ok" {
			return fmt.Errorf("%s reports cluster_state:%s", s.Addr, state)
		}
		if known := infoField(info, "cluster_known_nodes"); known != strconv.Itoa(len(nodes)) {
			return fmt.Errorf("%s knows %s nodes, want %d", s.Addr, known, len(nodes))
		}
		owners, replicas, err := slotOwners(s.Addr)
		if err != nil {
			return err
		}
		if first == nil {
			first = owners
		}
		for slot, owner := range owners {
			if owner == "" {
				return fmt.Errorf("%s sees slot %d unassigned", s.Addr, slot)
			}
			if owner != first[slot] {
				return fmt.Errorf("%s sees slot %d at %s, %s at %s", s.Addr, slot, owner, c.Addrs[0], first[slot])
			}
		}
		if c.Replicas != nil {
			for i, m := range c.Nodes {
				if got := replicas[m.Addr]; got != len(c.Replicas[i]) {
					return fmt.Errorf("%s sees %d replicas of %s, want %d", s.Addr, got, m.Addr, len(c.Replicas[i]))
				}
			}
		}
	}
	return nil
}

// slotOwners returns the address of each slot's master according to the
// CLUSTER SLOTS of the node at addr, "" for an unassigned slot, and the
// number of replicas listed with each master (the least over its ranges).
func slotOwners(addr string) ([]string, map[string]int, error) {
	reply, err := do(addr, "", "", "CLUSTER", "SLOTS")
	if err != nil {
		return nil, nil, fmt.Errorf("CLUSTER SLOTS on %s: %v", addr, err)
	}
	ranges, _ := reply.([]any)
	owners := make([]string, slotCount)
	replicas := map[string]int{}
	for _, r := range ranges {
		entry, _ := r.([]any)
		if len(entry) < 3 {
			return nil, nil, fmt.Errorf("CLUSTER SLOTS on %s: malformed entry %v", addr, r)
		}
		lo, _ := entry[0].(int64)
		hi, _ := entry[1].(int64)
		master, _ := entry[2].([]any)
		if lo < 0 || hi >= slotCount || lo > hi || len(master) < 2 {
			return nil, nil, fmt.Errorf("CLUSTER SLOTS on %s: malformed entry %v", addr, r)
		}
		ip, _ := master[0].(string)
		port, _ := master[1].(int64)
		owner := net.JoinHostPort(ip, strconv.FormatInt(port, 10))
		for slot := lo; slot <= hi; slot++ {
			owners[slot] = owner
		}
		if n, seen := replicas[owner]; !seen || len(entry)-3 < n {
			replicas[owner] = len(entry) - 3
		}
	}
	return owners, replicas, nil
}

// Reshard moves the first slots hash slots of Nodes[from] (the lowest
// numbered) to Nodes[to], keys and all, as an operator does: with
// redis-cli --cluster reshard, which marks each slot MIGRATING and
// IMPORTING, MIGRATEs its keys ten at a time and then gives the slot to
// Nodes[to]. Clients keep being served meanwhile. It returns when every
// slot has moved, and fails t when redis-cli is missing (or skips it, as
// Binary does) or fails. Cluster's fields do not follow the move: Nodes[i]
// no longer owns all of the i-th range.
func (c *Cluster) Reshard(t testing.TB, from, to, slots int) {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("FLOODGATE_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-cli not found; make test installs it with redis-server")
		}
		t.Skip("redis-cli not found on PATH (set FLOODGATE_REQUIRE_REDIS=1 to fail instead)")
	}
	id := func(s *Server) string {
		r, err := s.Do(t, "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr, err)
		}
		return r.(string)
	}
	args := []string{"--cluster", "reshard", c.Nodes[from].Addr,
		"--cluster-from", id(c.Nodes[from]), "--cluster-to", id(c.Nodes[to]),
		"--cluster-slots", strconv.Itoa(slots), "--cluster-yes"}
	if s := c.Nodes[from]; s.Password != "" {
		args = append(args, "--user", s.User, "--pass", s.Password)
	}
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster reshard: %v\n%s", err, out)
	}
}
