package devenv

import (
	"io"
	"net"
	"net/http"
	"time"
)

// ClientFrom returns an HTTP client whose connections come from the loopback address ip (e.g.
// 127.0.3.1), so the sidecars see a client of that address.
func ClientFrom(ip string) *http.Client {
	local := &net.TCPAddr{IP: net.ParseIP(ip)}
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: local}).DialContext, MaxIdleConnsPerHost: 4},
	}
}

// Response is what one request got.
type Response struct {
	Status  int
	Header  http.Header
	Elapsed time.Duration
}

// Send sends n GET requests for path to the pods in turn, with header, one after another.
func Send(c *http.Client, pods []*Pod, n int, path string, header http.Header) ([]Response, error) {
	out := make([]Response, 0, n)
	for i := range n {
		req, err := http.NewRequest(http.MethodGet, pods[i%len(pods)].URL+path, nil)
		if err != nil {
			return out, err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return out, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		out = append(out, Response{Status: resp.StatusCode, Header: resp.Header, Elapsed: time.Since(start)})
	}
	return out, nil
}

// Count counts responses by status code.
func Count(rs []Response) map[int]int {
	counts := map[int]int{}
	for _, r := range rs {
		counts[r.Status]++
	}
	return counts
}
