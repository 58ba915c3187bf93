// Package kubeletdir writes a directory the way the kubelet's atomic writer updates a mounted
// ConfigMap or downward-API volume, for the loopback kubelet of internal/devenv and the
// sidecar's tests: the one place that knows the `..data` symlink swap. It imports the
// standard library only, so the sidecar's tests may use it.
package kubeletdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Dir is a volume directory written as the kubelet writes one: each version in a new
// timestamped directory, a `..data_tmp` symlink to it renamed over `..data` (the atomic
// swap a reader watches for), and each top-level file a symlink name -> ..data/name. Links of
// files that left the source are removed, and so is the previous version. A Dir is not safe
// for concurrent use.
type Dir struct {
	dir string
	n   int
}

// New returns a Dir writing into dir, which is created on the first Write.
func New(dir string) *Dir { return &Dir{dir: dir} }

// Path returns the path a reader opens for the file name of the volume.
func (d *Dir) Path(name string) string { return filepath.Join(d.dir, name) }

// Write publishes a new version holding exactly files (names may contain slashes).
func (d *Dir) Write(files map[string][]byte) error {
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	d.n++
	version := fmt.Sprintf("..%s.%d", time.Now().UTC().Format("2006_01_02_15_04_05"), d.n)
	vdir := filepath.Join(d.dir, version)
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		p := filepath.Join(vdir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(d.dir, "..data"))
	tmp := filepath.Join(d.dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(version, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		return err
	}
	tops := map[string]bool{}
	for name := range files {
		top := strings.SplitN(name, "/", 2)[0]
		tops[top] = true
		link := filepath.Join(d.dir, top)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", top), link); err != nil {
				return err
			}
		}
	}
	// Files that left the source would stay as dangling links; the kubelet removes them too.
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type()&os.ModeSymlink != 0 && !strings.HasPrefix(e.Name(), "..") && !tops[e.Name()] {
			if err := os.Remove(filepath.Join(d.dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(d.dir, old)); err != nil {
			return err
		}
	}
	return nil
}
