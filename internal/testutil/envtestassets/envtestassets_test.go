package envtestassets

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// childEnv makes this test binary the child of TestWrappedBinaryDiesWithTheTestBinary: it runs
// the binary in the variable as envtest does (a plain exec), prints its PID and waits.
const childEnv = "SLUICE_ENVTEST_TEST_CHILD"

func TestMain(m *testing.M) {
	if bin := os.Getenv(childEnv); bin != "" {
		cmd := exec.Command(bin)
		if err := cmd.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		time.Sleep(time.Hour) // until killed (a bare select would be a deadlock, and an exit)
	}
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
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), childEnv+"="+filepath.Join(wrapped, "etcd"))
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the grandchild's PID: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the child said %q", line)
	}
	// The wrapper execs setpriv, which execs the binary: same PID, wait for the last exec.
	deadline := time.Now().Add(proc.Patience)
	for !strings.HasPrefix(comm(pid), "sleep") {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is %q, not the wrapped binary", pid, comm(pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	for comm(pid) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the wrapped binary %d still runs after its parent was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// comm is the command name of a running pid, "" when it is gone or a zombie.
func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 >= len(s) || s[end+2] == 'Z' {
		return ""
	}
	return s[open+1 : end]
}
