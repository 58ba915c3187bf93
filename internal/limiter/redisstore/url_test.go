package redisstore

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestNewClientFromURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // the client's type, or the start of the error
		// check inspects the options (nil: no check)
		check func(t *testing.T, c redis.UniversalClient)
	}{
		{url: "redis://localhost:6380/2", want: "*redis.Client", check: func(t *testing.T, c redis.UniversalClient) {
			o := c.(*redis.Client).Options()
			if o.Addr != "localhost:6380" || o.DB != 2 || o.TLSConfig != nil {
				t.Errorf("options %+v", o)
			}
			// NewClient turns MaxRetries -1 into 0, its "no retries".
			if !o.ContextTimeoutEnabled || o.MaxRetries != 0 || o.DialerRetries != 1 {
				t.Errorf("ContextTimeoutEnabled %v, MaxRetries %d, DialerRetries %d; want true, 0, 1",
					o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries)
			}
		}},
		{url: "rediss://user:s3cret@redis.example:6379?max_retries=2", want: "*redis.Client", check: func(t *testing.T, c redis.UniversalClient) {
			o := c.(*redis.Client).Options()
			if o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.example" || o.Username != "user" || o.Password != "s3cret" {
				t.Errorf("TLS %v, user %q, password %q", o.TLSConfig, o.Username, o.Password)
			}
			if o.MaxRetries != 2 {
				t.Errorf("MaxRetries %d; the URL's value should win", o.MaxRetries)
			}
		}},
		{url: "redis+cluster://:pw@10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000", want: "*redis.ClusterClient", check: func(t *testing.T, c redis.UniversalClient) {
			o := c.(*redis.ClusterClient).Options()
			if strings.Join(o.Addrs, ",") != "10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000" || o.Password != "pw" {
				t.Errorf("Addrs %v, password %q", o.Addrs, o.Password)
			}
			if !o.ContextTimeoutEnabled || o.MaxRetries != -1 || o.DialerRetries != 1 {
				t.Errorf("ContextTimeoutEnabled %v, MaxRetries %d, DialerRetries %d", o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries)
			}
		}},
		{url: "rediss+cluster://10.0.0.1:7000?dialer_retries=3&max_retries=1", want: "*redis.ClusterClient", check: func(t *testing.T, c redis.UniversalClient) {
			o := c.(*redis.ClusterClient).Options()
			if o.TLSConfig == nil {
				t.Error("no TLS for rediss+cluster")
			}
			if o.DialerRetries != 3 || o.MaxRetries != 1 {
				t.Errorf("DialerRetries %d, MaxRetries %d; the URL's values should win", o.DialerRetries, o.MaxRetries)
			}
		}},
		{url: "redis+sentinel://sentinel-0:26379/1?master_name=mymaster&addr=sentinel-1:26379", want: "*redis.Client"},
		{url: "redis+sentinel://sentinel-0:26379", want: "redisstore: a redis+sentinel URL needs ?master_name="},
		{url: "http://localhost", want: "redisstore: redis URL scheme \"http\""},
		{url: "redis+ring://localhost", want: "redisstore: redis URL scheme \"redis+ring\": unknown topology"},
		{url: "redis://localhost?no_such_option=1", want: "redisstore: redis: unexpected option"},
		{url: "redis://user:pw@[::1", want: "redisstore: parsing redis URL"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c, err := NewClientFromURL(tc.url)
			if err != nil {
				if !strings.HasPrefix(err.Error(), tc.want) {
					t.Fatalf("error %q, want %q", err, tc.want)
				}
				if strings.Contains(err.Error(), "pw") {
					t.Errorf("error %q reveals the password", err)
				}
				return
			}
			defer c.Close()
			if got := typeName(c); got != tc.want {
				t.Fatalf("client %s, want %s", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

func typeName(c redis.UniversalClient) string {
	switch c.(type) {
	case *redis.Client:
		return "*redis.Client"
	case *redis.ClusterClient:
		return "*redis.ClusterClient"
	}
	return "other"
}
