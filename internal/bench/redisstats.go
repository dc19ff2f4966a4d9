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
}

// RedisStats reads Redis's INFO: of one server, or of every master of a
// Cluster. Each Read is one INFO a server, which it leaves out of what it
// returns (one command and one read a server for each earlier Read), so
// that the difference of two Reads is everything else the servers did in
// between. It is safe for concurrent use, though Reads that overlap may
// count each other.
type RedisStats struct {
	client redis.UniversalClient
	mu     sync.Mutex
	reads  int64 // Reads done
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
	var (
		mu  sync.Mutex // ForEachMaster runs a goroutine per master
		sum = ServerCounters{}
	)
	add := func(ctx context.Context, c *redis.Client) error {
		text, err := c.Info(ctx).Result()
		if err != nil {
			return fmt.Errorf("INFO on %s: %w", c.Options().Addr, err)
		}
		n, err := parseInfo(text)
		if err != nil {
			return fmt.Errorf("INFO on %s: %w", c.Options().Addr, err)
		}
		mu.Lock()
		defer mu.Unlock()
		sum.Servers++
		sum.CPU += n.CPU
		sum.Commands += n.Commands - s.reads
		if n.Reads < 0 || sum.Reads < 0 {
			sum.Reads = -1
		} else {
			sum.Reads += n.Reads - s.reads
		}
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, add)
	case *redis.Client:
		err = add(ctx, c)
	default:
		err = fmt.Errorf("a %T: want a server's client or a Cluster's", s.client)
	}
	if err != nil {
		return ServerCounters{}, err
	}
	s.reads++
	return sum, nil
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
