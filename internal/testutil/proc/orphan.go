package proc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests that a process dies with its parent run the test binary itself as that parent:
// OrphanMain, called from TestMain, makes it start a process and wait to be killed; Orphan
// starts it, kills it, and hands back the PID of what it started.

// OrphanMain is for TestMain: when the variable env is set, this process is the parent of an
// Orphan test; start(value) starts the process under test, whose PID is printed, and this
// process waits to be killed. Otherwise OrphanMain returns.
func OrphanMain(env string, start func(value string) (*exec.Cmd, error)) {
	value := os.Getenv(env)
	if value == "" {
		return
	}
	cmd, err := start(value)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(cmd.Process.Pid)
	time.Sleep(time.Hour) // until killed (a bare select would be a deadlock, and an exit)
	os.Exit(1)
}

// Orphan runs this test binary as the parent of a process (OrphanMain, with env=value), waits
// until that process is running as named (its command name starts with comm), kills the parent
// with SIGKILL and returns the process's PID: the caller checks it is gone (Running).
func Orphan(t testing.TB, env, value, comm string) int {
	t.Helper()
	parent := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test binary itself
	parent.Env = append(os.Environ(), env+"="+value)
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the PID of the parent's child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the parent said %q", line)
	}
	// A wrapper may exec the process under test: same PID, wait for the last exec.
	deadline := time.Now().Add(Patience)
	for !strings.HasPrefix(Running(pid), comm) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is %q, not %s", pid, Running(pid), comm)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	return pid
}

// Running is the command name of pid while it runs; "" once it is gone or a zombie (dead,
// waiting for init to reap it).
func Running(pid int) string {
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

// WaitGone waits until pid no longer runs, failing t after Patience.
func WaitGone(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for Running(pid) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("process %d (%s) still runs %s after its parent was killed", pid, Running(pid), Patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
