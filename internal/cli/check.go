package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/internal/auth"
)

func (e *environ) check(args []string) int {
	var path string
	fs := e.flags("check", "[--config PATH]",
		"Validates a configuration and prints the policies and Envoy rules it defines. Every\n"+
			"problem is printed, one per line, as file:line: field: problem; the exit status is 1\n"+
			"when there is any. Without --config (or "+EnvConfig+") it checks the built-in one.\n"+
			"It checks what serve would run: with the environment serve reads applied (listen\n"+
			"addresses, the Redis store, the admin token), and the files the configuration names\n"+
			"(TLS certificates, the admin token file, the client tokens file) read.")
	fs.StringVar(&path, "config", "", "configuration `file or directory`")
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() == 1 && path == "" {
		path = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return e.errorf("check takes one configuration, found %q", strings.Join(fs.Args(), " "))
	}
	path = e.env(path, EnvConfig)
	cfg, err := e.loadConfig(path, serveFlags{})
	if err == nil {
		err = checkFiles(cfg)
	}
	if err != nil {
		var es config.Errors
		if errors.As(err, &es) {
			for _, x := range es {
				fmt.Fprintln(e.stderr, x.Error())
			}
			fmt.Fprintf(e.stderr, "%d problem(s): configuration refused\n", len(es))
			return 1
		}
		fmt.Fprintln(e.stderr, err)
		return 1
	}
	w := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "configuration: %s\n", strings.Join(cfg.Sources, ", "))
	fmt.Fprintf(w, "store: %s", cfg.Store.Type)
	switch cfg.Store.Type {
	case "redis":
		fmt.Fprintf(w, " (%s)", config.RedactURL(cfg.Store.URL))
	case "redis-cluster":
		fmt.Fprintf(w, " (%s)", strings.Join(cfg.Store.Addrs, ","))
	case "redis-sentinel":
		fmt.Fprintf(w, " (%s@%s)", cfg.Store.Master, strings.Join(cfg.Store.Addrs, ","))
		if cfg.Store.SentinelPassword != "" {
			fmt.Fprint(w, ", the sentinels' password set")
		}
	}
	if cfg.Store.UsesTLS() {
		fmt.Fprint(w, ", TLS")
	}
	if cfg.Store.ReadFromReplicas {
		fmt.Fprint(w, ", peeks from the replicas too")
	}
	fmt.Fprintf(w, ", timeout %s, failure mode %s\n", cfg.Store.Timeout, cfg.Failure.Mode)
	fmt.Fprintf(w, "listen: http %s (TLS %s), grpc %s (TLS %s), at most %d connections each\n",
		cfg.Listen.HTTP, cfg.Listen.HTTPTLS, cfg.Listen.GRPC, cfg.Listen.GRPCTLS, cfg.Bounds.MaxConnections)
	admin := "no token: admin endpoints answer 403"
	switch {
	case cfg.Admin.Token != "":
		admin = "token set"
	case cfg.Admin.AllowLoopback:
		admin = "no token: admin endpoints answer loopback callers (admin.allow_loopback)"
	}
	fmt.Fprintf(w, "admin: %s\n", admin)
	clients := "none: the decision APIs take anyone"
	switch {
	case cfg.Clients.TokensFile != "":
		clients = "tokens of " + cfg.Clients.TokensFile
	case cfg.ClientAuth():
		clients = "client certificates"
	}
	fmt.Fprintf(w, "client authentication: %s\n", clients)
	fmt.Fprintf(w, "\npolicies (%d):\n", len(cfg.Policies))
	for _, p := range cfg.Policies {
		fmt.Fprintf(w, "  %s\t%s\n", p.Name, p.String())
	}
	fmt.Fprintf(w, "\nEnvoy domains (%d):\n", len(cfg.Domains))
	sort.Slice(cfg.Domains, func(i, j int) bool { return cfg.Domains[i].Name < cfg.Domains[j].Name })
	for _, d := range cfg.Domains {
		atomic := ""
		if cfg.Envoy.Atomic(d.Name) {
			atomic = ", atomic: a request's descriptors are one group"
		}
		fmt.Fprintf(w, "  %s  (%s:%d%s)\n", d.Name, d.File, d.Line, atomic)
		printRules(w, d.Descriptors, "    ")
	}
	w.Flush()
	return 0
}

// checkFiles reads the files a configuration names, as serve will at
// start: each listener's TLS files and the client tokens file.
func checkFiles(cfg *config.Config) error {
	for _, l := range []struct {
		name string
		tls  config.TLS
	}{{"listen.http_tls", cfg.Listen.HTTPTLS}, {"listen.grpc_tls", cfg.Listen.GRPCTLS}} {
		if _, err := listenerTLS(l.tls, nil, slog.New(slog.DiscardHandler)); err != nil {
			return fmt.Errorf("floodgate: %s: %w", l.name, err)
		}
	}
	if err := (&auth.Clients{}).Load(cfg.Clients.TokensFile); err != nil {
		return fmt.Errorf("floodgate: clients.tokens_file: %w", err)
	}
	return nil
}

func printRules(w *tabwriter.Writer, ds []*config.Descriptor, indent string) {
	for _, d := range ds {
		what := d.Key
		if d.Value != "" {
			what += "=" + d.Value
		}
		limit := ""
		if rl := d.RateLimit; rl != nil {
			switch {
			case rl.Unlimited:
				limit = "unlimited"
			case rl.Policy != "":
				limit = "policy " + rl.Policy
			case rl.Spec != "":
				limit = rl.Spec
			default:
				limit = fmt.Sprintf("%d per %s", rl.RequestsPerUnit, rl.Unit)
			}
			var notes []string
			if rl.Name != "" {
				notes = append(notes, "name "+rl.Name)
			}
			if len(rl.Replaces) > 0 {
				notes = append(notes, "replaces "+strings.Join(rl.Replaces, ","))
			}
			if d.ShadowMode {
				notes = append(notes, "shadow mode")
			}
			if d.QuotaMode {
				notes = append(notes, "quota mode")
			}
			if len(notes) > 0 {
				limit += " (" + strings.Join(notes, "; ") + ")"
			}
		}
		fmt.Fprintf(w, "%s%s\t%s\n", indent, what, limit)
		printRules(w, d.Descriptors, indent+"  ")
	}
}
