package proc_test

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

const orphanEnv = "SLUICE_PROC_TEST_CHILD"

func TestMain(m *testing.M) {
	proc.OrphanMain(orphanEnv, func(cmdline string) (*exec.Cmd, error) {
		args := strings.Fields(cmdline)
		cmd := proc.Own(exec.Command(args[0], args[1:]...))
		return cmd, cmd.Start()
	})
	os.Exit(m.Run())
}

// TestChildDiesWithTheTestBinary: a process started with Own is killed when the process that
// started it is killed with SIGKILL (no cleanup of its own runs).
func TestChildDiesWithTheTestBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a parent-death signal is Linux's")
	}
	proc.WaitGone(t, proc.Orphan(t, orphanEnv, "sleep 600", "sleep"))
}
