// Command images builds Sluice's container images from static Go binaries, with no Docker
// daemon, using go-containerregistry: one layer holding the program, /etc/passwd and /etc/group
// for the non-root user 65532 and an empty /tmp, labelled with the version. The same binaries
// give the same image digests (every timestamp is SOURCE_DATE_EPOCH, or 0).
//
// With -registry it pushes REGISTRY/sluice-NAME:VERSION (credentials from ~/.docker/config.json,
// as docker login or crane auth login write them). Without, it writes one archive per image in
// -out: an OCI image layout that also holds docker save's manifest.json, which
// `ctr images import`, `kind load image-archive` and `docker load` all read.
//
//	images -version v0.1.0 -revision abc123 -out bin/images \
//	    manager=bin/images/manager sidecar=bin/images/sluice-sidecar ratelimit=bin/images/sluice-ratelimit
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	version := flag.String("version", "", "image tag and org.opencontainers.image.version label (required)")
	revision := flag.String("revision", "", "org.opencontainers.image.revision label: the source's VCS revision")
	registry := flag.String("registry", "", "push to REGISTRY/sluice-NAME:VERSION (host/prefix); empty writes archives to -out")
	prefix := flag.String("name-prefix", "ghcr.io/sluice-dev", "repository prefix the archives' image names use when -registry is empty")
	out := flag.String("out", "bin/images", "directory of the archives")
	arch := flag.String("arch", "amd64", "the binaries' GOARCH")
	flag.Parse()
	if err := run(*version, *revision, *registry, *prefix, *out, *arch, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(version, revision, registry, prefix, out, arch string, specs []string) error {
	if version == "" || len(specs) == 0 {
		return errors.New("usage: images -version V [-registry HOST/PREFIX] NAME=BINARY...")
	}
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		created = time.Unix(sec, 0).UTC()
	}
	repoPrefix := prefix
	if registry != "" {
		repoPrefix = strings.TrimSuffix(registry, "/")
	}
	for _, spec := range specs {
		short, bin, ok := strings.Cut(spec, "=")
		if !ok {
			return fmt.Errorf("%q is not NAME=BINARY", spec)
		}
		img, err := build(short, bin, version, revision, arch, created)
		if err != nil {
			return fmt.Errorf("%s: %w", short, err)
		}
		ref, err := name.NewTag(fmt.Sprintf("%s/sluice-%s:%s", repoPrefix, short, version))
		if err != nil {
			return err
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		if registry != "" {
			if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
				return fmt.Errorf("pushing %s: %w", ref, err)
			}
			fmt.Printf("pushed %s@%s\n", ref, digest)
			continue
		}
		path := filepath.Join(out, "sluice-"+short+".tar")
		if err := writeArchive(path, ref, img); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Printf("wrote %s: %s@%s\n", path, ref, digest)
	}
	return nil
}

// build is the image of one static program, run as /sluice-NAME (the manager as /manager, as
// its Dockerfile has it) by user 65532.
func build(short, bin, version, revision, arch string, created time.Time) (v1.Image, error) {
	program := "/sluice-" + short
	if short == "manager" {
		program = "/manager"
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(program, data, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: created}, CreatedBy: "make images (hack/images)",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: created}
	cf.Config = v1.Config{
		Entrypoint: []string{program},
		User:       "65532:65532",
		Env:        []string{"PATH=/"},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":    "sluice-" + short,
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": revision,
			"org.opencontainers.image.source":   "https://github.com/sluice-dev/sluice",
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the single layer: the non-root user, /tmp, and the program.
func rootfs(program string, data []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, step := range []func() error{
		func() error { return dir("etc/", 0o755) },
		func() error {
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
		},
		func() error { return file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")) },
		func() error { return dir("tmp/", 0o1777) },
		func() error { return file(strings.TrimPrefix(program, "/"), 0o755, data) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes img as an OCI image layout in a tar file, named ref in index.json (by
// containerd's io.containerd.image.name and the OCI ref.name annotations), with docker save's
// manifest.json beside it for tools that read only that.
func writeArchive(path string, ref name.Tag, img v1.Image) error {
	tmp, err := os.MkdirTemp("", "sluice-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref.String(),
		"org.opencontainers.image.ref.name": ref.TagStr(),
	})); err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		layerPaths = append(layerPaths, "blobs/sha256/"+d.Hex)
	}
	docker, err := json.Marshal([]map[string]any{{
		"Config": "blobs/sha256/" + cfgName.Hex, "RepoTags": []string{ref.String()}, "Layers": layerPaths,
	}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "manifest.json"), docker, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return tarDir(tmp, path)
}

// tarDir writes the files under dir into a tar at path, in lexical order, with fixed times.
func tarDir(dir, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: time.Unix(0, 0).UTC(), Mode: 0o644, Typeflag: tar.TypeReg}
		if d.IsDir() {
			h.Name, h.Typeflag, h.Mode = h.Name+"/", tar.TypeDir, 0o755
			return tw.WriteHeader(h)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
