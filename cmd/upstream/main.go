// Command upstream is the one small application put behind the sidecar outside a Go process:
// the real-node image (sluice.local/upstream:dev) and the proxy benchmark (bench/proxy.sh) run
// it. It serves internal/upstream's handler, which the loopback demo, the end-to-end test and
// bench/chaos run in process.
package main

import (
	"flag"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/sluice-dev/sluice/internal/upstream"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	name := flag.String("name", os.Getenv("HOSTNAME"), "name in responses (default $HOSTNAME)")
	flag.Parse()
	srv := &http.Server{Addr: *listen, Handler: &upstream.Handler{Name: *name}, ReadHeaderTimeout: 10 * time.Second}
	slog.Info("Serving", "listen", *listen, "name", *name)
	if err := srv.ListenAndServe(); err != nil {
		slog.Error("Serve failed", "err", err)
		os.Exit(1)
	}
}
