// Command idleconns holds many idle keep-alive client connections open to a proxy, as the
// clients of a pod behind a busy Service do: it opens -n connections to -addr, sends one GET
// on each and reads its response, prints "ready N" once every connection has served its
// request, and keeps them all open, idle, until its standard input closes or it is signalled.
// bench/proxy.sh reads the proxy's resident memory before and while they are held.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "the proxy's host:port")
	n := flag.Int("n", 1000, "connections to hold")
	path := flag.String("path", "/", "the path of each connection's one request")
	flag.Parse()

	conns := make([]net.Conn, 0, *n)
	for i := range *n {
		c, err := net.DialTimeout("tcp", *addr, 10*time.Second)
		if err != nil {
			log.Fatalf("connection %d: %v", i, err)
		}
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", *path, *addr); err != nil {
			log.Fatalf("connection %d: %v", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			log.Fatalf("connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			log.Fatalf("connection %d: %s (closed: %v), want 200 on a kept-alive connection", i, resp.Status, resp.Close)
		}
		conns = append(conns, c)
	}
	fmt.Printf("ready %d\n", len(conns))

	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-done:
	case <-sig:
	}
	for _, c := range conns {
		_ = c.Close()
	}
}
