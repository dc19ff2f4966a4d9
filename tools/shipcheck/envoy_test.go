package shipcheck

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/floodgatehq/floodgate/internal/cli"
)

// envoyConfig is the part of deploy/envoy/envoy.yaml the test reads.
type envoyConfig struct {
	StaticResources struct {
		Listeners []struct {
			FilterChains []struct {
				Filters []struct {
					TypedConfig struct {
						RouteConfig struct {
							VirtualHosts []struct {
								Routes []struct {
									Route struct {
										RateLimits []struct {
											Actions []map[string]map[string]string `yaml:"actions"`
										} `yaml:"rate_limits"`
									}
								}
							} `yaml:"virtual_hosts"`
						} `yaml:"route_config"`
						HTTPFilters []struct {
							Name        string
							TypedConfig struct {
								Domain           string
								RateLimitService struct {
									GRPCService struct {
										EnvoyGRPC struct {
											ClusterName string `yaml:"cluster_name"`
										} `yaml:"envoy_grpc"`
									} `yaml:"grpc_service"`
								} `yaml:"rate_limit_service"`
							} `yaml:"typed_config"`
						} `yaml:"http_filters"`
					} `yaml:"typed_config"`
				}
			} `yaml:"filter_chains"`
		}
		Clusters []struct {
			Name         string
			HealthChecks []struct {
				GRPCHealthCheck struct {
					ServiceName string `yaml:"service_name"`
				} `yaml:"grpc_health_check"`
			} `yaml:"health_checks"`
			LoadAssignment struct {
				Endpoints []struct {
					LBEndpoints []struct {
						Endpoint struct {
							Address struct {
								SocketAddress struct {
									Address   string
									PortValue int `yaml:"port_value"`
								} `yaml:"socket_address"`
							}
						}
					} `yaml:"lb_endpoints"`
				}
			} `yaml:"load_assignment"`
		}
	} `yaml:"static_resources"`
}

// TestEnvoyExample: deploy/envoy/envoy.yaml calls floodgate's gRPC port
// with the domain of deploy/kubernetes's configuration, and each
// descriptor its rate_limits actions produce is answered by a rule of
// that domain (a status with a limit, not the "no rule" OK), as a
// floodgate serving that configuration answers over gRPC.
func TestEnvoyExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo, "deploy/envoy/envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ec envoyConfig
	if err := yaml.Unmarshal(data, &ec); err != nil {
		t.Fatal(err)
	}
	var domain, cluster string
	var descriptors [][2]string // key, a value the action would send
	for _, l := range ec.StaticResources.Listeners {
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				for _, hf := range f.TypedConfig.HTTPFilters {
					if hf.Name == "envoy.filters.http.ratelimit" {
						domain, cluster = hf.TypedConfig.Domain, hf.TypedConfig.RateLimitService.GRPCService.EnvoyGRPC.ClusterName
					}
				}
				for _, vh := range f.TypedConfig.RouteConfig.VirtualHosts {
					for _, r := range vh.Routes {
						for _, rl := range r.Route.RateLimits {
							if len(rl.Actions) != 1 {
								t.Fatalf("a rate_limits entry with %d actions: extend this test", len(rl.Actions))
							}
							for kind, a := range rl.Actions[0] {
								switch kind {
								case "remote_address":
									descriptors = append(descriptors, [2]string{"remote_address", "192.0.2.7"})
								case "request_headers":
									v := "key-1"
									if a["header_name"] == ":path" {
										v = "/login/form"
									}
									descriptors = append(descriptors, [2]string{a["descriptor_key"], v})
								default:
									t.Fatalf("action %s: extend this test", kind)
								}
							}
						}
					}
				}
			}
		}
	}
	if domain == "" || len(descriptors) < 3 {
		t.Fatalf("envoy.yaml: domain %q, descriptors %v: the ratelimit filter or the routes' rate_limits are missing", domain, descriptors)
	}
	port := 0
	for _, c := range ec.StaticResources.Clusters {
		if c.Name != cluster {
			continue
		}
		for _, e := range c.LoadAssignment.Endpoints {
			for _, lb := range e.LBEndpoints {
				port = lb.Endpoint.Address.SocketAddress.PortValue
			}
		}
		if len(c.HealthChecks) != 1 || c.HealthChecks[0].GRPCHealthCheck.ServiceName != "envoy.service.ratelimit.v3.RateLimitService" {
			t.Errorf("cluster %s: want a gRPC health check of envoy.service.ratelimit.v3.RateLimitService", cluster)
		}
	}
	if port != 8081 {
		t.Errorf("the rate limit cluster %q sends to port %d, want floodgate's gRPC port 8081", cluster, port)
	}

	// Serve deploy/kubernetes's configuration and ask as Envoy would.
	cmData, err := os.ReadFile(filepath.Join(repo, "deploy/kubernetes/configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm := objects(t, "configmap.yaml", cmData)[0].(*corev1.ConfigMap)
	dir := t.TempDir()
	for name, text := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"serve", "--config", dir, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, &out, &errOut, func(string) string { return "" })
	}()
	defer func() {
		cancel()
		<-done
	}()
	re := regexp.MustCompile(`msg="floodgate serving".* grpc=(\S+)`)
	var addr string
	for deadline := time.Now().Add(20 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(errOut.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", errOut.String())
		}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err == nil && res.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the health of envoy.service.ratelimit.v3.RateLimitService: %v %v", res, err)
		}
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	for _, d := range descriptors {
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
			Domain: domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: d[0], Value: d[1]}},
			}},
		})
		if err != nil {
			t.Errorf("descriptor (%s, %s): %v", d[0], d[1], err)
			continue
		}
		if res.OverallCode != rlsv3.RateLimitResponse_OK || len(res.Statuses) != 1 || res.Statuses[0].CurrentLimit == nil {
			t.Errorf("descriptor (%s, %s) of domain %s: %v; want OK with the limit of a rule", d[0], d[1], domain, res)
		}
	}
	if !strings.Contains(errOut.String(), "domains=1") {
		t.Errorf("serve did not load one Envoy domain:\n%s", errOut.String())
	}
}
