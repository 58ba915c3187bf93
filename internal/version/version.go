// Package version is the version every Sluice binary reports with --version, and the image
// label and chart appVersion follow. Release builds set it with the linker:
//
//	go build -ldflags "-X github.com/sluice-dev/sluice/internal/version.Version=v0.1.0"
//
// (make images and the Dockerfiles do, from git describe). Without it, the version is the Go
// module's (go install ...@v0.1.0) or "devel" with the VCS revision go build recorded.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version, set with -ldflags -X; empty in an ordinary go build.
var Version string

// Get returns the version: Version when set, else what the build info records.
func Get() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}

// String is the line --version prints: the program, its version and the Go toolchain.
func String(program string) string {
	return fmt.Sprintf("%s %s (%s, %s/%s)", program, Get(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
