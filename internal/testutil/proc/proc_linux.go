package proc

import "syscall"

// attr asks Linux to SIGKILL the child when the thread that started it exits. Go starts
// children from threads that live as long as the process (none is locked and left), so in
// practice: when the test binary exits.
func attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
