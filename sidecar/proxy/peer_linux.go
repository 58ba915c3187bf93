package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// watchClose closes gone when the peer of c closes its side of the connection, until stop
// is called. It peeks (never consumes) so the server still reads whatever the client sends
// after; a peer that sends more bytes instead is taken to be still there, and stops the
// watch.
func watchClose(c net.Conn, gone chan struct{}) (stop func()) {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		closed := false
		err := rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EAGAIN) {
				return false // wait for readability
			}
			closed = n == 0 || err != nil
			return true
		})
		if closed && !errors.Is(err, os.ErrDeadlineExceeded) {
			close(gone)
		}
	}()
	return func() {
		_ = c.SetReadDeadline(time.Unix(1, 0)) // wakes the Read above
		<-done
		_ = c.SetReadDeadline(time.Time{})
	}
}
