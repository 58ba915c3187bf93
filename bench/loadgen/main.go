// Command loadgen is an open-loop load generator: it starts requests at a fixed rate whatever
// the answers' latency (wrk2's model, which Debian does not package) and reports latency
// percentiles measured from each request's scheduled start, so a stall is not hidden by the
// generator waiting for it (coordinated omission).
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18081/", "target URL")
	rate := flag.Int("rate", 1000, "requests per second")
	dur := flag.Duration("duration", 10*time.Second, "how long to send")
	warmup := flag.Duration("warmup", time.Second, "sent first and not measured")
	flag.Parse()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}, Timeout: 10 * time.Second}
	interval := time.Second / time.Duration(*rate)
	total := int((*warmup + *dur) / interval)
	skip := int(*warmup / interval)
	lat := make([]time.Duration, total)
	codes := make([]int, total)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < total; i++ {
		at := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(*url)
			if err != nil {
				codes[i] = -1
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				codes[i] = resp.StatusCode
			}
			lat[i] = time.Since(at)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	m := slices.Clone(lat[skip:])
	slices.Sort(m)
	bad := 0
	for _, c := range codes[skip:] {
		if c != 200 {
			bad++
		}
	}
	pct := func(p float64) string {
		return fmt.Sprintf("%.3fms", float64(m[int(float64(len(m)-1)*p)])/1e6)
	}
	fmt.Printf("rate=%d/s sent=%d in %s non200=%d p50=%s p90=%s p99=%s p99.9=%s max=%s\n",
		*rate, len(m), elapsed.Round(time.Millisecond), bad, pct(0.50), pct(0.90), pct(0.99), pct(0.999), pct(1))
	if bad > 0 {
		os.Exit(1)
	}
}
