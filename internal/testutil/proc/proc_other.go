//go:build !linux

package proc

import "syscall"

func attr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
