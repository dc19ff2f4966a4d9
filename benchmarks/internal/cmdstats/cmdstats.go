// Package cmdstats reads the per-command statistics of a redis-server
// (INFO commandstats) for the benchmark commands: how many times each
// command ran and how much server time it took, since the last CONFIG
// RESETSTAT.
package cmdstats

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Stat is one command's line of INFO commandstats.
type Stat struct {
	// Name is the command's name in lower case; a subcommand is named
	// after its command, as in "config|get".
	Name string
	// Calls is how many times the command ran.
	Calls float64
	// Usec is the server's time in the command, in microseconds. A
	// script's or function's time includes that of the commands it
	// calls, which are also counted on their own.
	Usec float64
}

// Read runs INFO commandstats on c and parses the answer with Parse.
func Read(ctx context.Context, c *redis.Client) ([]Stat, error) {
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return Parse(s), nil
}

// Parse parses the text of INFO commandstats, one line a command
// (cmdstat_<name>:calls=…,usec=…,…), and returns the commands sorted by
// name. It leaves out the harness's own commands: INFO and CONFIG with
// any subcommand (CONFIG RESETSTAT, CONFIG GET).
func Parse(text string) []Stat {
	var out []Stat
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		if name == "info" || name == "config" || strings.HasPrefix(name, "config|") {
			continue
		}
		st := Stat{Name: name}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st.Calls = x
			case "usec":
				st.Usec = x
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b Stat) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// PerDecision describes stats per decision of a run that made the given
// number of decisions: each command run at least once per 100 decisions,
// as "name calls/decision µs/call", the commands separated by ", ".
func PerDecision(stats []Stat, decisions float64) string {
	var cmds []string
	for _, st := range stats {
		if st.Calls/decisions >= 0.01 {
			cmds = append(cmds, fmt.Sprintf("%s %.2f/decision %.1fµs/call", st.Name, st.Calls/decisions, st.Usec/st.Calls))
		}
	}
	return strings.Join(cmds, ", ")
}
