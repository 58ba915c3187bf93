// Command mkimage writes a container image as a docker-save tarball without Docker: one layer
// holding programs (static binaries, or a dynamic one with the libraries it loads at their
// paths), /etc/passwd and /etc/group for the nonroot user (65532) and an empty /tmp, so that
// `ctr images import` can load locally built programs into containerd.
//
//	mkimage -o sidecar.tar -name sluice.local/sidecar:dev -entrypoint /sluice-sidecar \
//	    /path/to/built/sluice-sidecar=/sluice-sidecar
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"
)

// epoch stamps every file and the image, so that the same binaries give the same image.
var epoch = time.Unix(0, 0).UTC()

func main() {
	out := flag.String("o", "", "output tarball (docker save format)")
	name := flag.String("name", "", "fully qualified image name with tag, e.g. sluice.local/sidecar:dev")
	entrypoint := flag.String("entrypoint", "", "path of the program in the image")
	user := flag.String("user", "65532:65532", "user the image runs as")
	flag.Parse()
	if err := run(*out, *name, *entrypoint, *user, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(out, name, entrypoint, user string, files []string) error {
	if out == "" || name == "" || entrypoint == "" || len(files) == 0 {
		return errors.New("-o, -name, -entrypoint and at least one SRC=DEST file are required")
	}
	layer, err := buildLayer(files)
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": []string{entrypoint},
			"User":       user,
			"Env":        []string{"PATH=/"},
			"WorkingDir": "/",
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]string{{"created": epoch.Format(time.RFC3339), "created_by": "hack/realnode/mkimage"}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := hex.EncodeToString(layerSum[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": configName, "RepoTags": []string{name}, "Layers": []string{layerName},
	}})
	if err != nil {
		return err
	}

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{configName, config}, {layerName, layer}, {"manifest.json", manifest}} {
		if err := writeFile(tw, e.name, 0o644, e.data); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// buildLayer is the rootfs: the nonroot user, /tmp, and each SRC=DEST file (read through
// symbolic links), with the directories DEST needs.
func buildLayer(files []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []struct {
		name string
		mode int64
	}{{"etc/", 0o755}, {"tmp/", 0o1777}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := writeFile(tw, "etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")); err != nil {
		return nil, err
	}
	if err := writeFile(tw, "etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")); err != nil {
		return nil, err
	}
	dirs := map[string]bool{"etc/": true, "tmp/": true}
	for _, spec := range files {
		src, dest, ok := strings.Cut(spec, "=")
		if !ok || !path.IsAbs(dest) || path.Clean(dest) != dest || dest == "/" {
			return nil, fmt.Errorf("%q is not SRC=/path/in/image", spec)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		// Parent directories first, each once, so that every file's directory exists.
		name := dest[1:]
		for i := range name {
			if d := name[:i+1]; name[i] == '/' && !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch}); err != nil {
					return nil, err
				}
			}
		}
		if err := writeFile(tw, name, 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeFile adds a regular file owned by root.
func writeFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := io.Copy(tw, bytes.NewReader(data))
	return err
}
