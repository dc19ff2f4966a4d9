// Command ociimage assembles floodgate's container image without a
// container engine, with go-containerregistry: from scratch, one layer of
// files every image needs (/etc/passwd and /etc/group naming the non-root
// user, CA certificates for rediss://, the license and THIRD_PARTY
// notices) and one layer holding the static binary; one image per
// architecture, under one multi-platform index, written as an OCI image
// layout in a tar file (what "docker load", "podman load" and "skopeo copy
// oci-archive:..." read). Its output depends on its inputs only: every
// time in it is -created.
//
//	go run ./cmd/ociimage -o ../dist/floodgate_image.tar -version v0.1.0 -revision <commit> \
//	    -created 2026-11-26T05:04:00Z -license ../LICENSE -thirdparty ../dist/THIRD_PARTY.md \
//	    linux/amd64=../dist/floodgate_linux_amd64/floodgate linux/arm64=../dist/floodgate_linux_arm64/floodgate
//
// The image is the Dockerfile's, built another way: keep the two in step.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: distroless's "nonroot", a number no host account is
// likely to have.
const (
	uid      = 65532
	userName = "nonroot"
)

type options struct {
	out, version, revision, created, license, thirdParty, caCerts, caCopyright, repo string
	binaries                                                                         map[string]string // "linux/amd64" -> path
}

func main() {
	var o options
	flag.StringVar(&o.out, "o", "floodgate_image.tar", "the OCI archive to write")
	flag.StringVar(&o.version, "version", "", "org.opencontainers.image.version, and the image's tag")
	flag.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision: the commit")
	flag.StringVar(&o.created, "created", "", "the commit's time, RFC 3339: every time in the image")
	flag.StringVar(&o.license, "license", "LICENSE", "floodgate's license file")
	flag.StringVar(&o.thirdParty, "thirdparty", "THIRD_PARTY.md", "the THIRD_PARTY notice")
	flag.StringVar(&o.caCerts, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle to ship (Debian's ca-certificates)")
	flag.StringVar(&o.caCopyright, "ca-copyright", "/usr/share/doc/ca-certificates/copyright", "the CA bundle's copyright file")
	flag.StringVar(&o.repo, "repository", "floodgate", "the name the image is tagged with (org.opencontainers.image.ref.name)")
	flag.Parse()
	o.binaries = map[string]string{}
	for _, a := range flag.Args() {
		pl, path, ok := strings.Cut(a, "=")
		if !ok || !strings.Contains(pl, "/") {
			fmt.Fprintf(os.Stderr, "ociimage: %q: want os/arch=path\n", a)
			os.Exit(2)
		}
		o.binaries[pl] = path
	}
	if len(o.binaries) == 0 || o.version == "" || o.revision == "" || o.created == "" {
		fmt.Fprintln(os.Stderr, "ociimage: give -version, -revision, -created and at least one os/arch=binary")
		os.Exit(2)
	}
	if err := build(o); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func build(o options) error {
	created, err := time.Parse(time.RFC3339, o.created)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	created = created.UTC()
	read := func(p string) ([]byte, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	license, err := read(o.license)
	if err != nil {
		return err
	}
	thirdParty, err := read(o.thirdParty)
	if err != nil {
		return err
	}
	ca, err := read(o.caCerts)
	if err != nil {
		return fmt.Errorf("%w (apt-get install ca-certificates)", err)
	}
	caCopyright, err := read(o.caCopyright)
	if err != nil {
		return err
	}
	base, err := layer(created, []entry{
		{name: "etc/", dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, uid, uid, userName, userName))},
		{name: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, uid))},
		{name: "etc/ssl/", dir: true},
		{name: "etc/ssl/certs/", dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{name: "home/", dir: true},
		{name: "home/" + userName + "/", dir: true, mode: 0o700, uid: uid},
		{name: "tmp/", dir: true, mode: 0o1777},
		{name: "usr/", dir: true},
		{name: "usr/share/", dir: true},
		{name: "usr/share/doc/", dir: true},
		{name: "usr/share/doc/ca-certificates/", dir: true},
		{name: "usr/share/doc/ca-certificates/copyright", mode: 0o644, data: caCopyright},
		{name: "usr/share/doc/floodgate/", dir: true},
		{name: "usr/share/doc/floodgate/LICENSE", mode: 0o644, data: license},
		{name: "usr/share/doc/floodgate/THIRD_PARTY.md", mode: 0o644, data: thirdParty},
	})
	if err != nil {
		return err
	}
	platforms := make([]string, 0, len(o.binaries))
	for pl := range o.binaries {
		platforms = append(platforms, pl)
	}
	sort.Strings(platforms)
	labels := map[string]string{
		"org.opencontainers.image.title":         "floodgate",
		"org.opencontainers.image.description":   "Rate limit service: HTTP/JSON API and Envoy's gRPC rate limit API",
		"org.opencontainers.image.version":       o.version,
		"org.opencontainers.image.revision":      o.revision,
		"org.opencontainers.image.created":       created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":      "Apache-2.0",
		"org.opencontainers.image.source":        "https://github.com/floodgatehq/floodgate",
		"org.opencontainers.image.url":           "https://github.com/floodgatehq/floodgate",
		"org.opencontainers.image.documentation": "https://github.com/floodgatehq/floodgate/blob/main/docs/operations.md",
		"org.opencontainers.image.vendor":        "The floodgate Authors",
	}
	var adds []mutate.IndexAddendum
	for _, pl := range platforms {
		goos, arch, _ := strings.Cut(pl, "/")
		bin, err := read(o.binaries[pl])
		if err != nil {
			return err
		}
		app, err := layer(created, []entry{{name: "floodgate", mode: 0o755, data: bin}})
		if err != nil {
			return err
		}
		img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), base, app)
		if err != nil {
			return err
		}
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = goos, arch
		cf.Created = v1.Time{Time: created}
		cf.Author = "The floodgate Authors"
		cf.History = nil // AppendLayers' entries carry no times; none is better than the zero time
		cf.Config = v1.Config{
			User:       fmt.Sprintf("%d:%d", uid, uid),
			Entrypoint: []string{"/floodgate"},
			Cmd:        []string{"serve"},
			// Inside the image the service listens on every interface:
			// outside a container, floodgate's default is loopback only.
			Env: []string{
				"FLOODGATE_HTTP_ADDR=0.0.0.0:8080",
				"FLOODGATE_GRPC_ADDR=0.0.0.0:8081",
				"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
				"PATH=/",
			},
			WorkingDir:   "/home/" + userName,
			ExposedPorts: map[string]struct{}{"8080/tcp": {}, "8081/tcp": {}},
			Labels:       labels,
			StopSignal:   "SIGTERM",
		}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: goos, Architecture: arch},
		}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	idx = mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
	}).(v1.ImageIndex)

	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	tag := strings.ReplaceAll(o.version, "+", "_") // a tag allows [A-Za-z0-9_.-]
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          o.repo + ":" + tag,
	})); err != nil {
		return err
	}
	return tarDir(dir, o.out, created)
}

// entry is a file or directory of a layer.
type entry struct {
	name string
	dir  bool
	mode int64
	uid  int
	data []byte
}

// layer makes a gzip-compressed OCI layer of the entries, every time in
// it set to t.
func layer(t time.Time, entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: t, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// tarDir writes the directory dir as a tar file at out, in name order,
// with every time set to t and no owner names.
func tarDir(dir, out string, t time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, p := range names {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: t, Mode: 0o644, Format: tar.FormatPAX}
		if st.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
