// Command coredns is CoreDNS with only the plugins the real node's cluster DNS needs (the
// kubernetes plugin answers for Services and pods; no forward plugin, so no name outside the
// cluster is resolved and no query leaves the machine). hack/realnode/node.sh builds it once
// and runs it as the node's kube-dns (hack/realnode/coredns.yaml). A module of its own, so the
// project's module does not depend on CoreDNS.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
