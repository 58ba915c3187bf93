package proc_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// childEnv makes this test binary the child of TestChildDiesWithTheTestBinary: it starts the
// command in the variable with proc.Own, prints its PID and waits to be killed.
const childEnv = "SLUICE_PROC_TEST_CHILD"

func TestMain(m *testing.M) {
	if cmdline := os.Getenv(childEnv); cmdline != "" {
		args := strings.Fields(cmdline)
		cmd := proc.Own(exec.Command(args[0], args[1:]...))
		if err := cmd.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		time.Sleep(time.Hour) // until killed (a bare select would be a deadlock, and an exit)
	}
	os.Exit(m.Run())
}

// TestChildDiesWithTheTestBinary: a process started with Own is killed when the process that
// started it is killed with SIGKILL (no cleanup of its own runs).
func TestChildDiesWithTheTestBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a parent-death signal is Linux's")
	}
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), childEnv+"=sleep 600")
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
	if !alive(pid) {
		t.Fatalf("the grandchild %d is not running before the kill", pid)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	deadline := time.Now().Add(proc.Patience)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the grandchild %d still runs %s after its parent was killed", pid, proc.Patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid runs (exists and is not a zombie waiting for init to reap it).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
