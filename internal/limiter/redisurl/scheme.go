// Package redisurl names the schemes of a Redis URL (redis, rediss, +cluster, +sentinel) and
// takes them apart. It is a package of its own, without go-redis, so that the manager's webhook
// can check the sidecars' Redis URL without linking a Redis client.
package redisurl

import (
	"fmt"
	"strings"
)

// The topologies of a Redis URL: the part of its scheme after '+'.
const (
	TopologyStandalone = ""
	TopologyCluster    = "cluster"
	TopologySentinel   = "sentinel"
)

// Scheme is a Redis URL scheme taken apart: rediss (TLS) or redis, and the topology.
type Scheme struct {
	TLS      bool
	Topology string
}

// String is the scheme as written in a URL, e.g. rediss+cluster.
func (s Scheme) String() string {
	base := "redis"
	if s.TLS {
		base = "rediss"
	}
	if s.Topology == TopologyStandalone {
		return base
	}
	return base + "+" + s.Topology
}

// URLSchemes lists the schemes redisstore.NewClientFromURL accepts, for help texts and messages.
func URLSchemes() []string {
	out := make([]string, 0, 6)
	for _, topology := range []string{TopologyStandalone, TopologyCluster, TopologySentinel} {
		for _, tls := range []bool{false, true} {
			out = append(out, Scheme{TLS: tls, Topology: topology}.String())
		}
	}
	return out
}

// ParseScheme takes apart a Redis URL scheme (the part before "://"). Every reader of a Redis URL
// (redisstore, the webhook checking the manager's flag) checks the scheme with it, so that the
// accepted schemes and the error naming them are written once.
func ParseScheme(scheme string) (Scheme, error) {
	base, topology, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		all := URLSchemes()
		return Scheme{}, fmt.Errorf("redis URL scheme %q is not %s or %s", scheme, strings.Join(all[:len(all)-1], ", "), all[len(all)-1])
	}
	switch topology {
	case TopologyStandalone, TopologyCluster, TopologySentinel:
	default:
		return Scheme{}, fmt.Errorf("redis URL scheme %q: unknown topology %q, want %s or %s", scheme, topology, TopologyCluster, TopologySentinel)
	}
	return Scheme{TLS: base == "rediss", Topology: topology}, nil
}
