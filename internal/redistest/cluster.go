package redistest

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
)

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// A Cluster is a Redis Cluster of masters without replicas, started by
// StartCluster. Its fields do not change after StartCluster returns.
type Cluster struct {
	// Addrs are the nodes' addresses, in the order of Nodes.
	Addrs []string
	// Nodes are the masters; of the slots split into len(Nodes) equal
	// ranges, Nodes[i] first owns the i-th.
	Nodes []*Server
}

// StartCluster starts a Redis Cluster of masters nodes without replicas,
// each a server as StartServer makes one plus cluster-enabled yes, its
// nodes.conf in its temporary directory, and cluster-node-timeout 2000
// (milliseconds). It assigns the slots in equal ranges, joins the nodes,
// and returns once Wait succeeds, typically 2 to 3 seconds after the call.
// t.Cleanup stops every node. It is safe for concurrent use.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 1 || masters > slotCount {
		t.Fatalf("redistest: StartCluster(%d): need 1 to %d masters", masters, slotCount)
	}
	bin := Binary(t)
	c := &Cluster{}
	for range masters {
		s := newServer(t, bin, options{}).plain()
		s.bus = true
		s.directives = append(s.directives,
			"cluster-enabled yes",
			"cluster-config-file "+quote(filepath.Join(s.dir, "nodes.conf")),
			"cluster-node-timeout 2000",
			"cluster-announce-ip 127.0.0.1", // each node's own view names it as the others do
		)
		c.Nodes = append(c.Nodes, s)
	}
	startAll(t, c.Nodes...)
	for i, s := range c.Nodes {
		c.Addrs = append(c.Addrs, s.Addr)
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
	for i, a := range c.Nodes {
		for _, b := range c.Nodes[i+1:] {
			if _, err := a.Do(t, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(b.Port)); err != nil {
				t.Fatalf("redistest: CLUSTER MEET %s from %s: %v", b.Addr, a.Addr, err)
			}
		}
	}
	c.Wait(t)
	return c
}

// Wait waits until every node reports cluster_state:ok and knows all the
// nodes, and every node's CLUSTER SLOTS assigns all 16384 slots to the same
// nodes, polling for up to 15 seconds; then it fails the test with the last
// discrepancy. Use it after restarting a node. It is safe for concurrent
// use.
func (c *Cluster) Wait(t testing.TB) {
	t.Helper()
	if err := poll(startTimeout, c.check); err != nil {
		t.Fatalf("redistest: cluster %v did not settle within %v: %v", c.Addrs, startTimeout, err)
	}
}

// check reports the first sign that the cluster is not settled.
func (c *Cluster) check() error {
	var first []string // slot owners as the first node sees them
	for _, s := range c.Nodes {
		reply, err := do(s.Addr, "", "", "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %v", s.Addr, err)
		}
		info, _ := reply.(string)
		if state := infoField(info, "cluster_state"); state != "ok" {
			return fmt.Errorf("%s reports cluster_state:%s", s.Addr, state)
		}
		if known := infoField(info, "cluster_known_nodes"); known != strconv.Itoa(len(c.Nodes)) {
			return fmt.Errorf("%s knows %s nodes, want %d", s.Addr, known, len(c.Nodes))
		}
		owners, err := slotOwners(s.Addr)
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
	}
	return nil
}

// slotOwners returns the address of each slot's master according to the
// CLUSTER SLOTS of the node at addr, "" for an unassigned slot.
func slotOwners(addr string) ([]string, error) {
	reply, err := do(addr, "", "", "CLUSTER", "SLOTS")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS on %s: %v", addr, err)
	}
	ranges, _ := reply.([]any)
	owners := make([]string, slotCount)
	for _, r := range ranges {
		entry, _ := r.([]any)
		if len(entry) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS on %s: malformed entry %v", addr, r)
		}
		lo, _ := entry[0].(int64)
		hi, _ := entry[1].(int64)
		master, _ := entry[2].([]any)
		if lo < 0 || hi >= slotCount || lo > hi || len(master) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS on %s: malformed entry %v", addr, r)
		}
		ip, _ := master[0].(string)
		port, _ := master[1].(int64)
		owner := net.JoinHostPort(ip, strconv.FormatInt(port, 10))
		for slot := lo; slot <= hi; slot++ {
			owners[slot] = owner
		}
	}
	return owners, nil
}
