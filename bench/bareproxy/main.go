// Command bareproxy is the reference bench/proxy.sh measures the sidecar against: a bare
// fasthttp reverse proxy with the sidecar's server and upstream HostClient settings and
// nothing else (no header scan, no decision, no metrics). What the sidecar costs above it is
// what Sluice adds; what it costs itself is the floor of a Go proxy on fasthttp. The settings
// are spelled out here, not taken from sidecar/proxy: importing it would link and initialise
// the sidecar's packages (metrics registry, limiter) into the reference it is measured against.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-dev/sluice/internal/inject"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	upstream := flag.String("upstream", "127.0.0.1:8081", "the application's host:port")
	flag.Parse()

	// The sidecar's HostClient (sidecar/proxy newHostClient) without its retry policy.
	client := &fasthttp.HostClient{
		Addr:                          *upstream,
		MaxConns:                      1024,
		MaxIdleConnDuration:           90 * time.Second,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		StreamResponseBody:            true,
		ReadBufferSize:                16 << 10,
		WriteBufferSize:               16 << 10,
	}
	// The sidecar's fasthttp.Server settings (sidecar/proxy NewServer).
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Request.UseHostHeader = true
			if err := client.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Response.Reset()
				ctx.SetStatusCode(http.StatusBadGateway)
			}
		},
		NoDefaultServerHeader:         true,
		NoDefaultDate:                 true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: true,
		StreamRequestBody:             true,
		DisablePreParseMultipartForm:  true,
		ReadBufferSize:                inject.DefaultMaxHeaderBytes,
		WriteBufferSize:               16 << 10,
		ReduceMemoryUsage:             true,
		ReadTimeout:                   inject.DefaultReadHeaderTimeout,
		IdleTimeout:                   inject.DefaultIdleTimeout,
	}
	log.Fatal(srv.ListenAndServe(*listen))
}
