package redisstore

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// NewClientFromURL returns a go-redis client for a URL of one of these forms:
//
//	redis://[user:password@]host:port[/db][?option=value...]           one server
//	rediss://...                                                       the same over TLS
//	redis+cluster://[user:password@]host:port[?addr=host:port...]      Redis Cluster; the host
//	rediss+cluster://...                                               and each addr are seeds
//	redis+sentinel://[user:password@]host:port[/db]?master_name=NAME[&addr=host:port...]
//	rediss+sentinel://...                                              Sentinel; the host and
//	                                                                   each addr are sentinels
//
// The options are go-redis's URL options (ParseURL, ParseClusterURL, ParseFailoverURL: e.g.
// dial_timeout, pool_size, password for the data nodes behind Sentinel); an unknown option is an
// error. Two defaults differ from go-redis's, for a rate limiter:
//
//   - context deadlines are honoured (ContextTimeoutEnabled), so Options.Timeout bounds a call
//     even when Redis hangs;
//   - commands are not retried (max_retries=-1) unless the URL sets max_retries: a script whose
//     reply was lost may have run, and running it again would count the request twice; the
//     caller's fallback handles the failure instead;
//   - a refused connection is not dialled again within the call (dialer_retries=1) unless the
//     URL sets dialer_retries, so a Redis that is down fails a call at once rather than after
//     the whole budget spent in dial backoff.
//
// The caller owns the client and closes it.
func NewClientFromURL(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisstore: parsing redis URL: %w", redactErr(err))
	}
	base, topology, _ := strings.Cut(u.Scheme, "+")
	if base != "redis" && base != "rediss" {
		return nil, fmt.Errorf("redisstore: redis URL scheme %q is not redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel", u.Scheme)
	}
	retriesSet, dialRetriesSet := u.Query().Has("max_retries"), u.Query().Has("dialer_retries")
	plain := *u
	plain.Scheme = base
	switch topology {
	case "":
		o, err := redis.ParseURL(plain.String())
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialerRetries, retriesSet, dialRetriesSet)
		return redis.NewClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(plain.String())
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialerRetries, retriesSet, dialRetriesSet)
		return redis.NewClusterClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(plain.String())
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		if o.MasterName == "" {
			return nil, fmt.Errorf("redisstore: a %s URL needs ?master_name=", u.Scheme)
		}
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialerRetries, retriesSet, dialRetriesSet)
		return redis.NewFailoverClient(o), nil
	default:
		return nil, fmt.Errorf("redisstore: redis URL scheme %q: unknown topology %q, want cluster or sentinel", u.Scheme, topology)
	}
}

// failFast sets what every topology's options need: deadlines from the caller's context, no
// command retries (a retried script may count a request twice) and one dial per call, unless
// the URL set the retries itself.
func failFast(contextTimeout *bool, maxRetries, dialerRetries *int, retriesSet, dialRetriesSet bool) {
	*contextTimeout = true
	if !retriesSet {
		*maxRetries = -1
	}
	if !dialRetriesSet {
		*dialerRetries = 1
	}
}

// redactErr drops the URL from a url.Error, which may contain a password.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
