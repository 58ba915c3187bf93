package envtestassets

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

const orphanEnv = "SLUICE_ENVTEST_TEST_CHILD"

func TestMain(m *testing.M) {
	// The parent runs the binary as envtest does: a plain exec.
	proc.OrphanMain(orphanEnv, func(bin string) (*exec.Cmd, error) {
		cmd := exec.Command(bin)
		return cmd, cmd.Start()
	})
	os.Exit(m.Run())
}

// TestWrappedBinaryDiesWithTheTestBinary: an "etcd" run through the wrappers withDeathSignal
// writes is killed when the process that started it is killed with SIGKILL, as an API server
// and etcd are when a test binary is.
func TestWrappedBinaryDiesWithTheTestBinary(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv: the binaries are used as they are")
	}
	assets := t.TempDir()
	if err := os.WriteFile(filepath.Join(assets, "etcd"), []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	wrapped, err := withDeathSignal(assets)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(wrapped) })
	if again, err := withDeathSignal(assets); err != nil || again != wrapped {
		t.Fatalf("a second call gave %q, %v; want the same directory %q", again, err, wrapped)
	}
	proc.WaitGone(t, proc.Orphan(t, orphanEnv, filepath.Join(wrapped, "etcd"), "sleep"))
}
