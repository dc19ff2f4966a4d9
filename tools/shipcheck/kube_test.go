package shipcheck

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"
)

// objects decodes a multi-document YAML stream of Kubernetes objects,
// strictly: an unknown field or a value of the wrong type is an error.
// Kinds outside the built-in API (a ServiceMonitor) come back as maps.
func objects(t *testing.T, what string, data []byte) []any {
	t.Helper()
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	dec := codecs.UniversalDeserializer()
	var out []any
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := sigsyaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s: document %d: %v", what, i, err)
		}
		if head.Kind == "" {
			if strings.TrimSpace(stripComments(doc)) != "" {
				t.Fatalf("%s: document %d has no kind:\n%s", what, i, doc)
			}
			continue
		}
		obj, _, err := dec.Decode([]byte(doc), nil, nil)
		if runtime.IsNotRegisteredError(err) {
			var m map[string]any
			if err := sigsyaml.UnmarshalStrict([]byte(doc), &m); err != nil {
				t.Fatalf("%s: %s: %v", what, head.Kind, err)
			}
			out = append(out, m)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", what, head.Kind, err)
		}
		out = append(out, obj)
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// helmTemplate renders the chart with the given --set values.
func helmTemplate(t *testing.T, sets ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "fg", filepath.Join(repo, "deploy/helm/floodgate"), "--namespace", "rl"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(tool(t, "helm"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// deployment holds what a set of manifests is checked for.
type deployment struct {
	deploy     *appsv1.Deployment
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	services   []*corev1.Service
	pdbs       []*policyv1.PodDisruptionBudget
	others     []map[string]any
}

func collect(t *testing.T, objs []any) deployment {
	t.Helper()
	d := deployment{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			if d.deploy != nil {
				t.Fatalf("two Deployments: %s and %s", d.deploy.Name, o.Name)
			}
			d.deploy = o
		case *corev1.ConfigMap:
			d.configMaps[o.Name] = o
		case *corev1.Secret:
			d.secrets[o.Name] = o
		case *corev1.Service:
			d.services = append(d.services, o)
		case *policyv1.PodDisruptionBudget:
			d.pdbs = append(d.pdbs, o)
		case map[string]any:
			d.others = append(d.others, o)
		default:
			t.Fatalf("unexpected object %T", o)
		}
	}
	if d.deploy == nil {
		t.Fatal("no Deployment")
	}
	return d
}

// check verifies a floodgate Deployment and its companions: probes,
// ports, shutdown timing, security, the configuration passing floodgate
// check, Secrets referred to, Services and the PDB selecting the pods.
func (d deployment) check(t *testing.T, what string) {
	t.Helper()
	spec := d.deploy.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", what, len(spec.Containers))
	}
	c := spec.Containers[0]
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port != intstr.FromString("http") {
			t.Errorf("%s: %s probe: %+v, want GET %s on port http", what, name, p, path)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["grpc"] != 8081 {
		t.Errorf("%s: container ports %v, want http 8080 and grpc 8081", what, ports)
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("%s: args %q: want serve first", what, c.Args)
	}
	flag := func(name string) string {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		return ""
	}
	delay, err1 := time.ParseDuration(flag("shutdown-delay"))
	drain, err2 := time.ParseDuration(flag("drain"))
	if err1 != nil || err2 != nil || delay <= 0 {
		t.Errorf("%s: --shutdown-delay %q and --drain %q: want both, the delay > 0", what, flag("shutdown-delay"), flag("drain"))
	}
	if grace := spec.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second <= delay+drain {
		t.Errorf("%s: terminationGracePeriodSeconds (%v) does not exceed --shutdown-delay %v + --drain %v", what, ptrString(grace), delay, drain)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("%s: no CPU or memory request: %v", what, c.Resources.Requests)
	}
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: the pod may run as root: %+v", what, psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: container security context %+v: want a read-only root and no privilege escalation", what, sc)
	}

	// The configuration: the ConfigMap mounted at --config passes floodgate check.
	cfgDir := flag("config")
	var cmName string
	for _, m := range c.VolumeMounts {
		if m.MountPath == cfgDir {
			for _, v := range spec.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil {
					cmName = v.ConfigMap.Name
				}
			}
		}
	}
	cm := d.configMaps[cmName]
	if cm == nil {
		t.Fatalf("%s: --config=%s is not a mounted ConfigMap of these manifests", what, cfgDir)
	}
	dir := t.TempDir()
	for name, text := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, out := floodgateCheck(dir); code != 0 {
		t.Errorf("%s: floodgate check of ConfigMap %s: exit %d\n%s", what, cmName, code, out)
	}
	// And with the variables the manifests give it: the values of a
	// Secret they hold (the store's address, its passwords) must pass too.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			if s := d.secrets[e.ValueFrom.SecretKeyRef.Name]; s != nil {
				if v, ok := s.StringData[e.ValueFrom.SecretKeyRef.Key]; ok {
					env[e.Name] = v
				}
			}
		}
	}
	if len(env) > 0 {
		if code, out := floodgateCheckEnv(dir, env); code != 0 {
			t.Errorf("%s: floodgate check of ConfigMap %s with the variables %v: exit %d\n%s", what, cmName, slices.Sorted(maps.Keys(env)), code, out)
		}
	}

	// Every Secret a required variable reads is in the manifests.
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if ref.Optional != nil && *ref.Optional {
			continue
		}
		s := d.secrets[ref.Name]
		if s == nil {
			if !strings.Contains(what, "existingSecret") {
				t.Errorf("%s: %s reads Secret %s, which the manifests do not hold", what, e.Name, ref.Name)
			}
			continue
		}
		if _, ok := s.StringData[ref.Key]; !ok {
			t.Errorf("%s: %s reads key %s of Secret %s, which has %v", what, e.Name, ref.Key, ref.Name, s.StringData)
		}
	}

	labels := d.deploy.Spec.Template.Labels
	selects := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if len(d.services) == 0 {
		t.Errorf("%s: no Service", what)
	}
	for _, s := range d.services {
		sp := map[string]int32{}
		for _, p := range s.Spec.Ports {
			sp[p.Name] = p.Port
			if p.TargetPort.StrVal != p.Name {
				t.Errorf("%s: Service %s port %s targets %v", what, s.Name, p.Name, p.TargetPort)
			}
		}
		if sp["http"] != 8080 || sp["grpc"] != 8081 || !selects(s.Spec.Selector) {
			t.Errorf("%s: Service %s: ports %v, selector %v; want http 8080, grpc 8081 and the pods' labels %v", what, s.Name, sp, s.Spec.Selector, labels)
		}
	}
	if len(d.pdbs) != 1 || !selects(d.pdbs[0].Spec.Selector.MatchLabels) || d.pdbs[0].Spec.MinAvailable == nil {
		t.Errorf("%s: want one PodDisruptionBudget with minAvailable selecting the pods", what)
	}
	if !selects(d.deploy.Spec.Selector.MatchLabels) {
		t.Errorf("%s: the Deployment's selector %v does not select its pods %v", what, d.deploy.Spec.Selector.MatchLabels, labels)
	}
}

func envNames(d *appsv1.Deployment) string {
	var names []string
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		names = append(names, e.Name)
	}
	return strings.Join(names, " ")
}

// TestKubernetesManifests: deploy/kubernetes parses strictly as
// Kubernetes objects, and its Deployment passes check.
func TestKubernetesManifests(t *testing.T) {
	kust, err := os.ReadFile(filepath.Join(repo, "deploy/kubernetes/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Resources  []string
	}
	if err := sigsyaml.UnmarshalStrict(kust, &k); err != nil {
		t.Fatal(err)
	}
	var objs []any
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(repo, "deploy/kubernetes", r))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, objects(t, r, data)...)
	}
	collect(t, objs).check(t, "deploy/kubernetes")
}

// TestHelmChart: helm template renders the chart with each kind of
// store, and the objects pass check; values that make no sense are
// refused.
func TestHelmChart(t *testing.T) {
	for _, c := range []struct {
		name string
		sets []string
		env  string // the variables the container must have, in order
		more func(t *testing.T, d deployment)
	}{
		{"defaults", nil, "GOMEMLIMIT", func(t *testing.T, d deployment) {
			if len(d.secrets) != 0 || len(d.others) != 0 || len(d.services) != 2 {
				t.Errorf("secrets %d, services %d, other objects %v", len(d.secrets), len(d.services), d.others)
			}
			if *d.deploy.Spec.Replicas != 2 {
				t.Errorf("replicas %d", *d.deploy.Spec.Replicas)
			}
		}},
		{"redis url, the chart's Secret", []string{"redis.mode=url", "redis.url=redis://redis:6379/0", "redis.password=s3cret", "replicaCount=3"},
			"FLOODGATE_REDIS_URL FLOODGATE_REDIS_PASSWORD GOMEMLIMIT", func(t *testing.T, d deployment) {
				s := d.secrets["fg-floodgate-redis"]
				if s == nil || s.StringData["url"] != "redis://redis:6379/0" || s.StringData["password"] != "s3cret" {
					t.Errorf("the Redis Secret: %+v", s)
				}
				if *d.deploy.Spec.Replicas != 3 {
					t.Errorf("replicas %d", *d.deploy.Spec.Replicas)
				}
			}},
		{"redis cluster, an existingSecret", []string{"redis.mode=cluster", "redis.existingSecret=my-redis", "redis.clusterKey=addrs",
			"adminToken.existingSecret=my-admin", "serviceMonitor.enabled=true", "headlessService.enabled=false"},
			"FLOODGATE_REDIS_CLUSTER FLOODGATE_REDIS_PASSWORD FLOODGATE_ADMIN_TOKEN GOMEMLIMIT", func(t *testing.T, d deployment) {
				env := d.deploy.Spec.Template.Spec.Containers[0].Env
				if ref := env[0].ValueFrom.SecretKeyRef; ref.Name != "my-redis" || ref.Key != "addrs" {
					t.Errorf("FLOODGATE_REDIS_CLUSTER from %+v", ref)
				}
				if len(d.secrets) != 0 || len(d.services) != 1 {
					t.Errorf("secrets %d, services %d", len(d.secrets), len(d.services))
				}
				if len(d.others) != 1 || d.others[0]["kind"] != "ServiceMonitor" || d.others[0]["apiVersion"] != "monitoring.coreos.com/v1" {
					t.Errorf("want a ServiceMonitor: %v", d.others)
				}
			}},
		{"redis sentinel, the chart's Secret", []string{"redis.mode=sentinel", "redis.sentinel=mymaster@sentinel-0:26379\\,sentinel-1:26379",
			"redis.password=master-s3cret", "redis.sentinelPassword=sentinel-s3cret"},
			"FLOODGATE_REDIS_SENTINEL FLOODGATE_REDIS_PASSWORD FLOODGATE_REDIS_SENTINEL_PASSWORD GOMEMLIMIT", func(t *testing.T, d deployment) {
				s := d.secrets["fg-floodgate-redis"]
				if s == nil || s.StringData["sentinel"] != "mymaster@sentinel-0:26379,sentinel-1:26379" || s.StringData["password"] != "master-s3cret" ||
					s.StringData["sentinelPassword"] != "sentinel-s3cret" || len(s.StringData) != 3 {
					t.Errorf("the Redis Secret: %+v", s)
				}
			}},
		{"policies as values", []string{"policies.search=fixed_window 1000/1m", "config.failure.mode=closed"}, "GOMEMLIMIT", func(t *testing.T, d deployment) {
			cm := d.configMaps["fg-floodgate"].Data["floodgate.yaml"]
			if !strings.Contains(cm, "search: fixed_window 1000/1m") || !strings.Contains(cm, "mode: closed") {
				t.Errorf("floodgate.yaml:\n%s", cm)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := helmTemplate(t, c.sets...)
			if err != nil {
				t.Fatal(err)
			}
			d := collect(t, objects(t, c.name, out))
			what := "helm template " + strings.Join(c.sets, " ")
			d.check(t, what)
			if got := envNames(d.deploy); got != c.env {
				t.Errorf("environment %q, want %q", got, c.env)
			}
			c.more(t, d)
		})
	}
	for _, sets := range [][]string{{"redis.mode=sentinel"}, {"redis.mode=url"}, {"redis.mode=cluster"}, {"redis.mode=sentinels", "redis.sentinel=m@s:26379"},
		{"redis.mode=url", "redis.url=redis://r:6379", "redis.sentinelPassword=s3cret"}} {
		if _, err := helmTemplate(t, sets...); err == nil {
			t.Errorf("helm template --set %s: rendered, want an error", strings.Join(sets, " "))
		}
	}
}

// TestChartMatchesManifests: the chart's default configuration is the
// plain manifests' (the Envoy example relies on both).
func TestChartMatchesManifests(t *testing.T) {
	out, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	chart := collect(t, objects(t, "helm", out)).configMaps["fg-floodgate"]
	data, err := os.ReadFile(filepath.Join(repo, "deploy/kubernetes/configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plain := objects(t, "configmap.yaml", data)[0].(*corev1.ConfigMap)
	for name := range plain.Data {
		var a, b any
		if err := sigsyaml.Unmarshal([]byte(plain.Data[name]), &a); err != nil {
			t.Fatal(err)
		}
		if err := sigsyaml.Unmarshal([]byte(chart.Data[name]), &b); err != nil {
			t.Fatal(err)
		}
		if name == "floodgate.yaml" {
			// The plain manifests bound the memory store; the chart leaves
			// the store to its values.
			delete(a.(map[string]any)["store"].(map[string]any), "max_keys")
		}
		ja, _ := sigsyaml.Marshal(a)
		jb, _ := sigsyaml.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Errorf("%s differs between deploy/kubernetes and the chart:\n%s\n---\n%s", name, ja, jb)
		}
	}
}

func ptrString(p *int64) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}
