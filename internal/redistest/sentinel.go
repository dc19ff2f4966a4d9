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

type sentinelOptions struct {
	tls                          *Certs
	masterUser, masterPassword   string
	sentinelUser, sentinelPasswd string
}

// WithSentinelTLS makes the master, the replica and the sentinels listen
// for TLS as well (WithTLS, without client certificates), with
// replication, and the sentinels' own connections to the servers, over
// TLS: the sentinels monitor the master's TLS port, and name TLS ports to
// clients.
func WithSentinelTLS(certs *Certs) SentinelOption {
	return func(o *sentinelOptions) { o.tls = certs }
}

// WithMasterAuth makes the master and the replica refuse clients without
// credentials: with user "", password is the default user's (requirepass);
// otherwise user is an ACL user with every permission and the default user
// is off (as WithUser). The replica replicates, and the sentinels monitor,
// with the same credentials (masteruser, masterauth; sentinel auth-user,
// auth-pass). Master.Do and Replica.Do authenticate with them.
func WithMasterAuth(user, password string) SentinelOption {
	return func(o *sentinelOptions) { o.masterUser, o.masterPassword = user, password }
}

// WithSentinelAuth makes the sentinels themselves refuse clients without
// credentials, as WithMasterAuth does the master (user "": requirepass,
// which the sentinels also send each other; otherwise an ACL user, sent to
// each other as sentinel-user and sentinel-pass). Each sentinel's Do
// authenticates with them.
func WithSentinelAuth(user, password string) SentinelOption {
	return func(o *sentinelOptions) { o.sentinelUser, o.sentinelPasswd = user, password }
}

// newAuthServer prepares a server of o that asks for user and password
// (nothing for an empty password), and whose Do sends them.
func newAuthServer(t testing.TB, bin string, o options, user, password string) *Server {
	t.Helper()
	if user != "" {
		o.user, o.password = user, password // newServer writes the ACL user
		return newServer(t, bin, o)
	}
	s := newServer(t, bin, o)
	if password != "" {
		s.Password = password // Do sends AUTH password
		s.directives = append(s.directives, "requirepass "+quote(password))
	}
	return s
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
	var serverAuth []string
	if o.masterPassword != "" {
		serverAuth = append(serverAuth, "masterauth "+quote(o.masterPassword)) // the replica, and the master once demoted
		if o.masterUser != "" {
			serverAuth = append(serverAuth, "masteruser "+quote(o.masterUser))
		}
	}
	sn.Master = newAuthServer(t, bin, options{tls: o.tls}, o.masterUser, o.masterPassword).plain()
	sn.Master.directives = append(sn.Master.directives, "repl-diskless-sync-delay 0")
	sn.Master.directives = append(sn.Master.directives, serverAuth...)
	startAll(t, sn.Master)
	masterPort := strconv.Itoa(sn.Master.Port)
	if sn.tls {
		masterPort = strconv.Itoa(sn.Master.TLSPort)
	}

	sn.Replica = newAuthServer(t, bin, options{tls: o.tls}, o.masterUser, o.masterPassword).plain()
	sn.Replica.directives = append(sn.Replica.directives,
		"repl-diskless-sync-delay 0", // in case it is promoted
		"replicaof 127.0.0.1 "+masterPort)
	sn.Replica.directives = append(sn.Replica.directives, serverAuth...)
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
		s := newAuthServer(t, bin, options{args: []string{"--sentinel"}, tls: o.tls}, o.sentinelUser, o.sentinelPasswd)
		s.directives = append(s.directives,
			"sentinel monitor "+sn.MasterName+" 127.0.0.1 "+masterPort+" 2",
			"sentinel down-after-milliseconds "+sn.MasterName+" 1000",
			"sentinel failover-timeout "+sn.MasterName+" 10000",
		)
		if o.sentinelUser != "" {
			s.directives = append(s.directives, "sentinel sentinel-user "+quote(o.sentinelUser), "sentinel sentinel-pass "+quote(o.sentinelPasswd))
		}
		if o.masterPassword != "" {
			s.directives = append(s.directives, "sentinel auth-pass "+sn.MasterName+" "+quote(o.masterPassword))
			if o.masterUser != "" {
				s.directives = append(s.directives, "sentinel auth-user "+sn.MasterName+" "+quote(o.masterUser))
			}
		}
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
	reply, err := do(s.Addr, s.User, s.Password, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sn.MasterName)
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
	reply, err = do(s.Addr, s.User, s.Password, "SENTINEL", "MASTER", sn.MasterName)
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
