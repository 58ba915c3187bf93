// Command upstream is the benchmark's application: it answers every request with a short body
// over HTTP/1.1 keep-alive, so the measurements are about what sits in front of it.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18080", "listen address")
	flag.Parse()
	body := []byte("ok\n")
	srv := &http.Server{
		Addr: *addr,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Content-Type"] = []string{"text/plain"}
			_, _ = w.Write(body)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	log.Fatal(srv.ListenAndServe())
}
