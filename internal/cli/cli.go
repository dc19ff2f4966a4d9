// Package cli is floodgate's command line: serve, check, allow, peek,
// reset, keys, usage, bench and version. It is the one package that wires stores,
// service and transports together; cmd/floodgate only calls Main.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/floodgatehq/floodgate/internal/buildinfo"
)

// Environment variables the commands read (flags win over them, and they
// win over the configuration file). The environment table below says
// which commands read each, and what for.
const (
	EnvConfig        = "FLOODGATE_CONFIG"
	EnvHTTP          = "FLOODGATE_HTTP_ADDR"
	EnvGRPC          = "FLOODGATE_GRPC_ADDR"
	EnvRedisURL      = "FLOODGATE_REDIS_URL"
	EnvRedisCluster  = "FLOODGATE_REDIS_CLUSTER"
	EnvRedisSentinel = "FLOODGATE_REDIS_SENTINEL"
	EnvRedisPassword = "FLOODGATE_REDIS_PASSWORD"
	// EnvSentinelPassword is the sentinels' own password
	// (store.sentinel_password).
	EnvSentinelPassword = "FLOODGATE_REDIS_SENTINEL_PASSWORD"
	EnvAdminToken       = "FLOODGATE_ADMIN_TOKEN"
	EnvKeySecret        = "FLOODGATE_KEY_SECRET"
	EnvTokenKey         = "FLOODGATE_TOKEN_KEY"
	EnvURL              = "FLOODGATE_URL"
	EnvToken            = "FLOODGATE_TOKEN"
	// EnvCalendarMonth is envoyproxy/ratelimit's variable of the same
	// meaning: "true" makes Envoy's month unit the UTC calendar month
	// (envoy.calendar_month, which it overrides when set).
	EnvCalendarMonth = "USE_CALENDAR_MONTH_RATE_LIMIT"
)

// envVar documents one environment variable: each command's --help lists
// those it reads, and docs/operations.md's table is generated from the
// same list (a test keeps the two equal).
type envVar struct {
	name string
	cmds []string // the commands that read it
	doc  string
}

var environment = []envVar{
	{EnvConfig, []string{"serve", "check"}, "the configuration file or directory"},
	{EnvHTTP, []string{"serve", "check"}, "the HTTP listen address, as --http"},
	{EnvGRPC, []string{"serve", "check"}, "the gRPC listen address, as --grpc"},
	{EnvRedisURL, []string{"serve", "check"}, "the Redis store, as --redis"},
	{EnvRedisCluster, []string{"serve", "check"}, "the Redis Cluster store, as --redis-cluster"},
	{EnvRedisSentinel, []string{"serve", "check"}, "the Redis store behind Sentinel, as --redis-sentinel"},
	{EnvRedisPassword, []string{"serve", "check"}, "the password of a cluster, or of the master behind sentinels"},
	{EnvSentinelPassword, []string{"serve", "check"}, "the sentinels' own password (their requirepass), when they ask for one: store.sentinel_password"},
	{EnvAdminToken, []string{"serve", "check", "reset", "keys", "usage"}, "serve, check: the admin endpoints' bearer token (16+ characters; --admin-token-file wins); the others: the admin token to send"},
	{EnvToken, []string{"allow", "peek", "reserve", "settle", "bench"}, "the client token to send, for a service with clients.tokens_file (16+ characters)"},
	{EnvKeySecret, []string{"serve"}, "store an HMAC-SHA-256 of every key in Redis instead of the key (16+ bytes)"},
	{EnvCalendarMonth, []string{"serve", "check"}, "envoyproxy/ratelimit's: true makes Envoy's month unit the UTC calendar month, false 30 days from the epoch; wins over envoy.calendar_month"},
	{EnvTokenKey, []string{"serve"}, "the key that signs reservation tokens (budgets.token_key; 32+ bytes, the same on every replica)"},
	{EnvURL, []string{"allow", "peek", "reserve", "settle", "reset", "keys", "usage", "bench"}, "the service's HTTP address (default " + defaultURL + "; https:// for TLS)"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_*", []string{"serve"}, "export traces over OTLP/gRPC (OpenTelemetry's standard variables; off without them)"},
}

// envOf returns the environment variables cmd reads.
func envOf(cmd string) []envVar {
	var out []envVar
	for _, v := range environment {
		if slices.Contains(v.cmds, cmd) {
			out = append(out, v)
		}
	}
	return out
}

// Main runs the command line of args (without the program name) and
// returns the exit status: 0 success, 1 error, 2 usage error, 3 a
// request denied (allow, peek, reserve).
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, stdout, stderr, os.Getenv)
}

// Run is Main with an explicit context (cancelled to stop serve) and
// environment, for tests.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	e := &environ{ctx: ctx, stdout: stdout, stderr: stderr, getenv: env}
	switch args[0] {
	case "serve":
		return e.serve(args[1:])
	case "check":
		return e.check(args[1:])
	case "allow", "peek":
		return e.decide(args[0], args[1:])
	case "reset":
		return e.reset(args[1:])
	case "reserve":
		return e.reserve(args[1:])
	case "settle":
		return e.settle(args[1:])
	case "keys":
		return e.keys(args[1:])
	case "usage":
		return e.usageCmd(args[1:])
	case "bench":
		return e.bench(args[1:])
	case "config":
		return e.configCmd(args[1:])
	case "version", "--version", "-version":
		return e.version(args[1:])
	case "help", "-h", "--help", "-help":
		if len(args) > 1 {
			return Run(ctx, []string{args[1], "--help"}, stdout, stderr, env)
		}
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "floodgate: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `floodgate: a rate limiter service.

Usage:
  floodgate serve   [flags]             run the service (HTTP/JSON and Envoy's gRPC API)
  floodgate check   [--config PATH]     validate a configuration and list its policies
  floodgate allow   [flags] POLICY KEY  ask a running service to decide a request
  floodgate peek    [flags] POLICY KEY  the same, recording nothing
  floodgate reserve [flags] POLICY KEY N  reserve N units; prints the token to settle with
  floodgate settle  [flags] TOKEN USED  give back a reservation's units beyond USED
  floodgate reset   [flags] POLICY KEY  forget a key's state (admin)
  floodgate keys    [flags] POLICY      list a tracked policy's keys, top or page by page (admin)
  floodgate usage   [flags] POLICY KEY  a key's usage series: a table and a sparkline (admin)
  floodgate bench   [flags]             load a limiter; report speed, latency and accuracy
  floodgate config  defaults|env        print every configuration field at its default, or
                                        the environment variables
  floodgate version                     print the version

Run "floodgate COMMAND --help" for a command's flags. docs/operations.md is the manual.
`)
}

// environ is what commands run with.
type environ struct {
	ctx            context.Context
	stdout, stderr io.Writer
	getenv         func(string) string
}

// flags returns a FlagSet whose --help prints the command's usage and
// the environment variables it reads.
func (e *environ) flags(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("floodgate "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: floodgate %s %s\n\n%s\n\nFlags:\n", name, synopsis, about)
		printFlags(w, fs)
		if envs := envOf(name); len(envs) > 0 {
			fmt.Fprintln(w, "\nEnvironment (flags win over it):")
			for _, v := range envs {
				fmt.Fprintf(w, "  %s\n    \t%s\n", v.name, v.doc)
			}
		}
	}
	return fs
}

// aliasMark starts the usage of a flag that alias defined.
const aliasMark = "\x00alias of "

// alias defines -short as another name of the flag long, already defined:
// both set the same value. --help lists it with long ("-c, --concurrency").
func alias(fs *flag.FlagSet, short, long string) {
	fs.Var(fs.Lookup(long).Value, short, aliasMark+long)
}

// longName returns the name of f, or of the flag f is an alias of.
func longName(f *flag.Flag) string {
	if long, ok := strings.CutPrefix(f.Usage, aliasMark); ok {
		return long
	}
	return f.Name
}

func printFlags(w io.Writer, fs *flag.FlagSet) {
	shorts := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if long := longName(f); long != f.Name {
			shorts[long] = f.Name
		}
	})
	fs.VisitAll(func(f *flag.Flag) {
		if longName(f) != f.Name {
			return
		}
		arg, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if s, ok := shorts[f.Name]; ok {
			line = "  -" + s + ", --" + f.Name
		}
		if arg != "" {
			line += " " + arg
		}
		line += "\n    \t" + strings.ReplaceAll(help, "\n", "\n    \t")
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			line += " (default " + f.DefValue + ")"
		}
		fmt.Fprintln(w, line)
	})
}

// parse parses args; it returns the exit status to stop with, or -1 to go on.
func (e *environ) parse(fs *flag.FlagSet, args []string) int {
	fs.SetOutput(e.stderr)
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(e.stdout)
			fs.Usage()
			return 0
		}
	}
	// Flags may come after the arguments (floodgate peek api alice
	// --cost 2), as users write them; "--" ends the flags.
	var positional []string
	fs.SetOutput(io.Discard) // parse errors are reported below, in our words
	defer fs.SetOutput(e.stderr)
	for {
		if err := fs.Parse(args); err != nil {
			fmt.Fprintf(e.stderr, "%s: %s\nRun \"%s --help\" for its flags.\n", fs.Name(), flagError(fs, err), fs.Name())
			return 2
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	fs.Parse(append([]string{"--"}, positional...))
	// No duration flag means anything below zero: say so rather than read
	// --drain -5s as "at once" or --watch -1s as "never".
	bad := ""
	fs.Visit(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		if d, ok := g.Get().(time.Duration); ok && d < 0 && bad == "" {
			bad = fmt.Sprintf("--%s %s: a duration is never negative: want one such as 2s or 500ms", longName(f), d)
		}
	})
	if bad != "" {
		fmt.Fprintf(e.stderr, "%s: %s\nRun \"%s --help\" for its flags.\n", fs.Name(), bad, fs.Name())
		return 2
	}
	return -1
}

// flagError restates a flag package error with the two-dash spelling that
// --help and the documentation use, and for an unknown flag names the
// closest known one.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		msg = "unknown flag " + dashed(name)
		best, bestD := "", 3 // suggest only within 2 edits
		fs.VisitAll(func(f *flag.Flag) {
			if d := editDistance(name, f.Name); d < bestD && d < len(name) {
				best, bestD = f.Name, d
			}
		})
		if best != "" {
			msg += " (did you mean --" + best + "?)"
		}
		return msg
	}
	// The flag package says only "parse error" of a value it cannot read:
	// say what the flag takes instead.
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok && strings.HasSuffix(msg, ": parse error") {
		if i := strings.LastIndex(rest, " for flag -"); i >= 0 {
			name := strings.TrimSuffix(rest[i+len(" for flag -"):], ": parse error")
			if f := fs.Lookup(name); f != nil {
				if want := wantOf(f); want != "" {
					return fmt.Sprintf("invalid value %s for flag %s: %s", rest[:i], dashed(name), want)
				}
			}
		}
	}
	// "invalid value "x" for flag -name: ..." and the like.
	return strings.NewReplacer(" flag -", " flag --", " for -", " for --", "flag needs an argument: -", "flag needs an argument: --").Replace(msg)
}

// dashed spells a flag's name as --help lists it: -c, --concurrency.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// wantOf says what a typed flag takes, in the words of an error message,
// or "" for a flag of its own type (which says so itself).
func wantOf(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration such as 2s, 500ms or 1m30s (units ns, us, ms, s, m, h)"
	case int, int64:
		return "want a whole number such as 10"
	case uint, uint64:
		return "want a whole number of 0 or more"
	case float64:
		return "want a number, such as 0.5 or 2"
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// env returns the first non-empty of the flag value and the variable.
func (e *environ) env(flagValue, name string) string {
	if flagValue != "" {
		return flagValue
	}
	return strings.TrimSpace(e.getenv(name))
}

// badUsage prints a usage error of command cmd and returns exit status 2.
func (e *environ) badUsage(cmd, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "floodgate %s: "+format+"\n", append([]any{cmd}, args...)...)
	fmt.Fprintf(e.stderr, "(floodgate %s --help lists the flags)\n", cmd)
	return 2
}

func (e *environ) errorf(format string, args ...any) int {
	fmt.Fprintf(e.stderr, "floodgate: "+format+"\n", args...)
	return 1
}

// Version returns what "floodgate version" prints after the program's
// name: the version, then the commit, its date and the Go release in
// brackets (internal/buildinfo says where each comes from).
func Version() string {
	return strings.TrimPrefix(buildinfo.Read().String(), "floodgate ")
}

// version prints the version line: "floodgate v0.1.0 (<revision>, <date>,
// go1.26.8)" for a release build; a build without the release's -ldflags
// prints "(devel)" for the version and "unknown" for what it did not
// record.
func (e *environ) version(args []string) int {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprint(e.stdout, `Usage: floodgate version

Prints the version, the commit it was built from, that commit's date (RFC 3339,
UTC) and the Go release that compiled it:

  floodgate v0.1.0 (<revision>, <date>, go1.26.x)

A build without make release's stamp prints (devel) for the version and unknown
for a revision or date the Go toolchain did not record.
`)
			return 0
		}
	}
	if len(args) > 0 {
		fmt.Fprintf(e.stderr, "floodgate version: takes no arguments, found %q\n", args[0])
		return 2
	}
	fmt.Fprintln(e.stdout, buildinfo.Read().String())
	return 0
}
