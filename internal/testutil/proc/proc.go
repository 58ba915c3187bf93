// Package proc holds what a test (or the demo) sets on every process it starts, so that no
// process outlives the program that started it.
package proc

import (
	"os/exec"
	"time"
)

// Own sets cmd to run in its own process group (a Ctrl-C aimed at the test does not reach it
// first, and a paused child stops nothing else) and, where the system can (Linux), to be killed
// when the process that started it dies: a test binary killed by a timeout or a second Ctrl-C
// leaves no redis-server, sidecar or Prometheus behind. It returns cmd.
func Own(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = attr()
	return cmd
}

// Patience is how long a test waits for an event (a process ready, a reconnection, a decision
// back in Redis) before it calls it a hang. It only bounds a hang: on an idle machine the events
// come in milliseconds, on a loaded one in seconds, and no test asserts how long they took.
const Patience = 2 * time.Minute
