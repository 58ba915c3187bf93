package redisstore

import (
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter/redisurl"
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
// error. Three defaults differ from go-redis's, for a rate limiter:
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
// The client holds at most MaxConns connections per node and closes those idle for
// DefaultIdleTimeout, whatever pool options the URL sets; NewClient says how and takes other
// ClientOptions.
//
// The caller owns the client and closes it.
func NewClientFromURL(rawURL string) (redis.UniversalClient, error) {
	return NewClient(rawURL, ClientOptions{})
}

// buildClient parses rawURL and makes its client with d's pool bounds, hooks and (for a cluster)
// slot map function.
func buildClient(rawURL string, d *dialer) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisstore: parsing redis URL: %w", redactErr(err))
	}
	scheme, err := redisurl.ParseScheme(u.Scheme)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	retriesSet, dialRetriesSet := u.Query().Has("max_retries"), u.Query().Has("dialer_retries")
	plain := *u
	plain.Scheme = redisurl.Scheme{TLS: scheme.TLS}.String()
	switch scheme.Topology {
	case redisurl.TopologyStandalone:
		o, err := redis.ParseURL(plain.String())
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialerRetries, retriesSet, dialRetriesSet)
		d.bound(&o.PoolSize, &o.MaxActiveConns, &o.MinIdleConns, &o.PipelinePoolSize, &o.ConnMaxIdleTime)
		c := redis.NewClient(o)
		c.AddHook(d)
		return c, nil
	case redisurl.TopologyCluster:
		o, err := redis.ParseClusterURL(plain.String())
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialerRetries, retriesSet, dialRetriesSet)
		d.bound(&o.PoolSize, &o.MaxActiveConns, &o.MinIdleConns, &o.PipelinePoolSize, &o.ConnMaxIdleTime)
		nodes := &nodeClients{}
		o.ClusterSlots = d.clusterSlots(seedOptions(o), slices.Clone(o.Addrs), nodes)
		o.NewClient = nodeClient
		c := redis.NewClusterClient(o)
		c.OnNewNode(func(node *redis.Client) {
			nodes.add(node)
			node.AddHook(d)
		})
		return c, nil
	case redisurl.TopologySentinel:
		o, err := redis.ParseFailoverURL(plain.String())
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		if o.MasterName == "" {
			return nil, fmt.Errorf("redisstore: a %s URL needs ?master_name=", u.Scheme)
		}
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialerRetries, retriesSet, dialRetriesSet)
		d.bound(&o.PoolSize, &o.MaxActiveConns, &o.MinIdleConns, &o.PipelinePoolSize, &o.ConnMaxIdleTime)
		c := redis.NewFailoverClient(o)
		c.AddHook(d)
		return c, nil
	default:
		return nil, fmt.Errorf("redisstore: redis URL scheme %q: topology %q has no client", u.Scheme, scheme.Topology) // ParseScheme prevents it
	}
}

// seedOptions are the options of a one-off client asking a cluster node for the slot map
// (Addr set per node): the cluster's credentials, TLS and timeouts, one connection.
func seedOptions(o *redis.ClusterOptions) *redis.Options {
	opts := &redis.Options{
		Protocol:              o.Protocol,
		Username:              o.Username,
		Password:              o.Password,
		CredentialsProvider:   o.CredentialsProvider,
		TLSConfig:             o.TLSConfig,
		DialTimeout:           o.DialTimeout,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		ContextTimeoutEnabled: o.ContextTimeoutEnabled,
		MaxRetries:            -1,
		DialerRetries:         1,
		PoolSize:              1,
		MaxActiveConns:        1,
		PipelinePoolSize:      -1,
		DisableIdentity:       o.DisableIdentity,
		ClientName:            o.ClientName,
	}
	if o.ClientName != "" {
		opts.ClientName = o.ClientName + "-slots" // tells these apart in CLIENT LIST
	}
	return opts
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
