package shipcheck

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// untar extracts the tar file at path into dir (regular files and
// directories only).
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("%s: entry %q leaves the archive", path, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: entry %q of type %c", path, h.Name, h.Typeflag)
		}
	}
}

// layerFiles returns the regular files of an image's layers, later
// layers winning, path -> content, with their modes.
func layerFiles(t *testing.T, img v1.Image) (map[string][]byte, map[string]int64, map[string]int) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files, modes, uids := map[string][]byte{}, map[string]int64{}, map[string]int{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimPrefix(h.Name, "./")
			modes[name], uids[name] = h.Mode, h.Uid
			if h.Typeflag == tar.TypeReg {
				if files[name], err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
		rc.Close()
	}
	return files, modes, uids
}

// TestImage reads make image's OCI archive as a registry client would:
// one index naming the version, an image for linux/amd64 and linux/arm64,
// each configured to run floodgate serve as a non-root user on all
// interfaces with ports 8080 and 8081, labelled, shipping the license,
// the THIRD_PARTY notice and CA certificates; and the amd64 image's
// binary, extracted from its layer, runs and prints the release's
// version.
func TestImage(t *testing.T) {
	d := dist(t)
	archive := filepath.Join(d, "floodgate_image.tar")
	if _, err := os.Stat(archive); err != nil {
		if os.Getenv("SHIP_REQUIRE") != "" {
			t.Fatalf("%v (SHIP_REQUIRE is set: run make image)", err)
		}
		t.Skipf("%v: run make image", err)
	}
	// The release binary's version line says what the image must carry.
	line, err := exec.Command(filepath.Join(d, "floodgate_linux_amd64", "floodgate"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^floodgate (\S+) \(([0-9a-f]{12})[0-9a-z-]*, (\S+), go\S+\)\n$`).FindStringSubmatch(string(line))
	if m == nil {
		t.Fatalf("the release binary's version: %q", line)
	}
	version, shortRev, created := m[1], m[2], m[3]

	dir := t.TempDir()
	untar(t, archive, dir)
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("index.json: %+v; want one entry named %s", im.Manifests, version)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	ixm, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	platforms := map[string]v1.Hash{}
	for _, desc := range ixm.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		platforms[desc.Platform.OS+"/"+desc.Platform.Architecture] = desc.Digest
	}
	if len(platforms) != 2 || platforms["linux/amd64"] == (v1.Hash{}) || platforms["linux/arm64"] == (v1.Hash{}) {
		t.Fatalf("platforms %v: want linux/amd64 and linux/arm64", platforms)
	}
	for pl, digest := range platforms {
		img, err := idx.Image(digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS+"/"+cf.Architecture != pl {
			t.Errorf("%s: the config says %s/%s", pl, cf.OS, cf.Architecture)
		}
		c := cf.Config
		if strings.Join(c.Entrypoint, " ") != "/floodgate" || strings.Join(c.Cmd, " ") != "serve" {
			t.Errorf("%s: entrypoint %q, cmd %q; want /floodgate serve", pl, c.Entrypoint, c.Cmd)
		}
		if uid, _, _ := strings.Cut(c.User, ":"); c.User == "" || uid == "0" || uid == "root" {
			t.Errorf("%s: user %q: want a non-root one", pl, c.User)
		}
		if _, ok := c.ExposedPorts["8080/tcp"]; !ok || len(c.ExposedPorts) != 2 {
			t.Errorf("%s: exposed ports %v, want 8080/tcp and 8081/tcp", pl, c.ExposedPorts)
		}
		if _, ok := c.ExposedPorts["8081/tcp"]; !ok {
			t.Errorf("%s: exposed ports %v, want 8081/tcp", pl, c.ExposedPorts)
		}
		env := strings.Join(c.Env, " ")
		if !strings.Contains(env, "FLOODGATE_HTTP_ADDR=0.0.0.0:8080") || !strings.Contains(env, "FLOODGATE_GRPC_ADDR=0.0.0.0:8081") {
			t.Errorf("%s: environment %q: want the service on all interfaces", pl, c.Env)
		}
		if c.Healthcheck != nil {
			t.Errorf("%s: a HEALTHCHECK: probes are the orchestrator's", pl)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.created":  created,
		} {
			if c.Labels[k] != want {
				t.Errorf("%s: label %s = %q, want %q", pl, k, c.Labels[k], want)
			}
		}
		if rev := c.Labels["org.opencontainers.image.revision"]; len(rev) != 40 || !strings.HasPrefix(rev, shortRev) {
			t.Errorf("%s: label org.opencontainers.image.revision = %q, want the commit %s...", pl, rev, shortRev)
		}
		files, modes, uids := layerFiles(t, img)
		for _, f := range []string{"floodgate", "etc/passwd", "etc/group", "etc/ssl/certs/ca-certificates.crt", "usr/share/doc/floodgate/LICENSE", "usr/share/doc/floodgate/THIRD_PARTY.md"} {
			if len(files[f]) == 0 {
				t.Errorf("%s: no /%s in the image", pl, f)
			}
		}
		if modes["floodgate"]&0o111 == 0 || uids["floodgate"] != 0 || modes["floodgate"]&0o022 != 0 {
			t.Errorf("%s: /floodgate has mode %o, owner %d: want executable, owned by root, writable by root only", pl, modes["floodgate"], uids["floodgate"])
		}
		uid, _, _ := strings.Cut(c.User, ":")
		if !regexp.MustCompile(`(?m)^\w+:x:` + uid + `:`).Match(files["etc/passwd"]) {
			t.Errorf("%s: /etc/passwd has no entry for the user %s:\n%s", pl, uid, files["etc/passwd"])
		}
		if !strings.Contains(string(files["usr/share/doc/floodgate/THIRD_PARTY.md"]), "google.golang.org/grpc") {
			t.Errorf("%s: THIRD_PARTY.md does not list grpc", pl)
		}
		if pl != "linux/amd64" {
			continue
		}
		bin := filepath.Join(t.TempDir(), "floodgate")
		if err := os.WriteFile(bin, files["floodgate"], 0o755); err != nil {
			t.Fatal(err)
		}
		got, err := exec.Command(bin, "version").Output()
		if err != nil || string(got) != string(line) {
			t.Errorf("the image's floodgate version: %q, %v; want the release's %q", got, err, line)
		}
	}
}
