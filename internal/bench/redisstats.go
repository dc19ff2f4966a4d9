package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerStats reads the cumulative counters of the servers a run's
// decisions cost (Config.Server): Run reads them before the first request
// and after the last answer, and reports the difference per decision.
// Implementations must leave their own work out of that difference.
type ServerStats interface {
	// Read returns the servers' counters now, summed over them.
	Read(ctx context.Context) (ServerCounters, error)
}

// ServerCounters are cumulative counters of one or more servers, summed.
type ServerCounters struct {
	// Servers is how many servers were read.
	Servers int
	// CPU is the servers' user and system CPU time since they started.
	CPU time.Duration
	// Commands counts the commands they processed.
	Commands int64
	// Reads counts their reads from client sockets, -1 when unknown: a
	// pipelined batch of commands is often one read.
	Reads int64
	// Changed says how the servers are not those an earlier Read read (a
	// restart, a failover), "" when they are: the difference of the two
	// Reads is then not their work.
	Changed string

	runID, role string // one server's, from its INFO
}

// RedisStats reads Redis's INFO: of one server (behind sentinels, the
// master they name at each Read), or of every master of a Cluster as its
// first Read found them. Each Read is one INFO a server,
// which it leaves out of what it returns (one command and one read a
// server for each earlier Read), so that the difference of two Reads is
// everything else the servers did in between. A server that restarted
// or changed role since the first Read is named in Changed; a master a
// Cluster gained since is not read. It is safe for concurrent use, though
// Reads that overlap may count each other.
type RedisStats struct {
	client redis.UniversalClient
	master string // the name of the master a Sentinel client reaches, or ""
	mu     sync.Mutex
	nodes  []*statsNode // the servers of the first Read
	reads  int64        // Reads done
}

// statsNode is one server RedisStats reads, with what its first Read found.
type statsNode struct {
	client      *redis.Client
	name        string // its address, or the master's name behind sentinels
	runID, role string
}

// NewRedisStats returns a reader of the INFO of client's server, or of its
// Cluster's masters. It does not close client.
func NewRedisStats(client redis.UniversalClient) *RedisStats {
	return &RedisStats{client: client}
}

// Read returns the counters of the server, or the sum over the Cluster's
// masters. An error names the server that failed and why (such as an ACL
// user without the INFO command).
func (s *RedisStats) Read(ctx context.Context) (ServerCounters, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		nodes, err := s.servers(ctx)
		if err != nil {
			return ServerCounters{}, err
		}
		s.nodes = nodes
	}
	sum := ServerCounters{}
	var changed []string
	for _, n := range s.nodes {
		addr := n.name
		text, err := n.client.Info(ctx).Result()
		if err != nil {
			return ServerCounters{}, fmt.Errorf("INFO on %s: %w", addr, err)
		}
		c, err := parseInfo(text)
		if err != nil {
			return ServerCounters{}, fmt.Errorf("INFO on %s: %w", addr, err)
		}
		switch {
		case n.runID == "":
			n.runID, n.role = c.runID, c.role
		case c.runID != n.runID && s.master != "":
			changed = append(changed, addr+" is another server now, or restarted (a failover?)")
		case c.runID != n.runID:
			changed = append(changed, addr+" restarted")
		case c.role != n.role:
			changed = append(changed, fmt.Sprintf("%s is a %s now, not a %s (a failover)", addr, c.role, n.role))
		}
		sum.Servers++
		sum.CPU += c.CPU
		sum.Commands += c.Commands - s.reads
		if c.Reads < 0 || sum.Reads < 0 {
			sum.Reads = -1
		} else {
			sum.Reads += c.Reads - s.reads
		}
	}
	sum.Changed = strings.Join(changed, "; ")
	s.reads++
	return sum, nil
}

// servers returns the server of a client, or the masters of a Cluster's.
func (s *RedisStats) servers(ctx context.Context) ([]*statsNode, error) {
	switch c := s.client.(type) {
	case *redis.Client:
		name := c.Options().Addr
		if s.master != "" {
			// A Sentinel client: INFO goes to the master the sentinels
			// name at each call.
			name = fmt.Sprintf("the master %q", s.master)
		}
		return []*statsNode{{client: c, name: name}}, nil
	case *redis.ClusterClient:
		var (
			mu    sync.Mutex // ForEachMaster runs a goroutine per master
			nodes []*statsNode
		)
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			nodes = append(nodes, &statsNode{client: m, name: m.Options().Addr})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("the Cluster's masters: %w", err)
		}
		return nodes, nil
	}
	return nil, fmt.Errorf("a %T: want a server's client or a Cluster's", s.client)
}

// parseInfo reads the counters of one server's INFO reply.
func parseInfo(text string) (ServerCounters, error) {
	c := ServerCounters{Servers: 1, Reads: -1}
	var cpu float64
	var haveUser, haveSys, haveCommands bool
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		var err error
		switch name {
		case "used_cpu_user", "used_cpu_sys":
			var v float64
			v, err = strconv.ParseFloat(value, 64)
			cpu += v
			haveUser = haveUser || name == "used_cpu_user"
			haveSys = haveSys || name == "used_cpu_sys"
		case "total_commands_processed":
			c.Commands, err = strconv.ParseInt(value, 10, 64)
			haveCommands = true
		case "total_reads_processed":
			c.Reads, err = strconv.ParseInt(value, 10, 64)
		case "run_id":
			c.runID = value
		case "role":
			c.role = value
		}
		if err != nil {
			return c, fmt.Errorf("%s %q: %w", name, value, err)
		}
	}
	if !haveUser || !haveSys || !haveCommands {
		return c, errors.New("the reply lacks used_cpu_user, used_cpu_sys or total_commands_processed")
	}
	c.CPU = time.Duration(math.Round(cpu * 1e9))
	return c, nil
}
