// Command agnhost stands in, on the real node of `make test-realnode` (which has no internet to
// pull from), for the part of Kubernetes' e2e test image agnhost that docs/quickstart.md runs:
// `agnhost netexec --http-port=N`, an HTTP server that answers every path with 200 and the time,
// as netexec's root handler does. node.sh imports it under the image name the quickstart uses.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "netexec" {
		fmt.Fprintln(os.Stderr, "usage: agnhost netexec [--http-port=N] (the only subcommand of this stand-in)")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("netexec", flag.ExitOnError)
	port := fs.Int("http-port", 8080, "HTTP port")
	_ = fs.Parse(os.Args[2:])
	srv := &http.Server{
		Addr:              fmt.Sprintf(":%d", *port),
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = fmt.Fprintf(w, "NOW: %s", time.Now().UTC().Format(time.RFC3339Nano))
		}),
	}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "agnhost:", err)
		os.Exit(1)
	}
}
