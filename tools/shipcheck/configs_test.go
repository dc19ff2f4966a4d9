package shipcheck

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// shipped sorts every YAML file of deploy/ and examples/: a floodgate
// configuration (checked here), or what else it is (checked elsewhere). A
// new file must be added here, so that no example configuration ships
// unchecked.
var shipped = map[string]string{
	"deploy/deb/floodgate.yaml":                           "config",
	"deploy/deb/nfpm.yaml":                                "nfpm's package description (make release builds with it)",
	"deploy/kubernetes/configmap.yaml":                    "a ConfigMap of configuration (TestKubernetesManifests checks it)",
	"deploy/kubernetes/deployment.yaml":                   "Kubernetes (TestKubernetesManifests)",
	"deploy/kubernetes/service.yaml":                      "Kubernetes (TestKubernetesManifests)",
	"deploy/kubernetes/pdb.yaml":                          "Kubernetes (TestKubernetesManifests)",
	"deploy/kubernetes/kustomization.yaml":                "Kubernetes (TestKubernetesManifests)",
	"deploy/envoy/envoy.yaml":                             "Envoy (TestEnvoyExample)",
	"deploy/prometheus/alerts.yaml":                       "alerts (promtool check rules, TestDashboardAndAlertsUseServedMetrics)",
	"deploy/prometheus/alerts_test.yaml":                  "promtool test rules",
	"deploy/helm/floodgate/Chart.yaml":                    "Helm (helm lint, TestHelmChart)",
	"deploy/helm/floodgate/values.yaml":                   "Helm (TestHelmChart checks the ConfigMap rendered from it)",
	"deploy/helm/floodgate/templates/configmap.yaml":      "Helm template",
	"deploy/helm/floodgate/templates/deployment.yaml":     "Helm template",
	"deploy/helm/floodgate/templates/service.yaml":        "Helm template",
	"deploy/helm/floodgate/templates/pdb.yaml":            "Helm template",
	"deploy/helm/floodgate/templates/secret.yaml":         "Helm template",
	"deploy/helm/floodgate/templates/servicemonitor.yaml": "Helm template",
}

// TestShippedConfigs: every floodgate configuration in deploy/ and
// examples/ passes floodgate check, and every other YAML file there is
// known to some other test.
func TestShippedConfigs(t *testing.T) {
	found := map[string]bool{}
	for _, top := range []string{"deploy", "examples"} {
		err := filepath.WalkDir(filepath.Join(repo, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if ext := filepath.Ext(p); ext != ".yaml" && ext != ".yml" {
				return nil
			}
			rel, _ := filepath.Rel(repo, p)
			rel = filepath.ToSlash(rel)
			found[rel] = true
			kind, ok := shipped[rel]
			switch {
			case !ok:
				t.Errorf("%s: a YAML file this test does not know: if it is a floodgate configuration, add it to shipped as \"config\"; else say what checks it", rel)
			case kind == "config":
				if code, out := floodgateCheck(p); code != 0 {
					t.Errorf("floodgate check --config %s: exit %d\n%s", rel, code, out)
				} else if !strings.Contains(out, "policies (") {
					t.Errorf("floodgate check --config %s printed no policies:\n%s", rel, out)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for rel := range shipped {
		if !found[rel] {
			t.Errorf("%s is listed in shipped but does not exist", rel)
		}
	}
}
