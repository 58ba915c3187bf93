package devenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"

	"github.com/sluice-dev/sluice/internal/inject"
)

// FreePodIP returns a loopback address for a stand-in pod (RunPod) on which nothing listens on
// the application's port appPort nor on the sidecar's default ports, nor on extra: a random one
// of 127.64.0.0/10, which no fixed address of this package, of the demo (127.0.2.x) or of the
// clients (127.0.3.x) is in. Tests use it so that two suites, a slow teardown of an earlier run
// or a running demo cannot hold a test's pod addresses. (Another process may take a port
// between the probe and RunPod; the space is large enough that it practically never does.)
func FreePodIP(appPort int, extra ...int) (string, error) {
	ports := append([]int{appPort, int(inject.DefaultListenPort), int(inject.DefaultMetricsPort)}, extra...)
	for range 100 {
		ip := fmt.Sprintf("127.%d.%d.%d", 64+rand.IntN(64), rand.IntN(256), 1+rand.IntN(254)) //nolint:gosec // an address to probe, not a secret
		if portsFree(ip, ports) {
			return ip, nil
		}
	}
	return "", errors.New("devenv: no loopback address with free pod ports after 100 tries")
}

func portsFree(ip string, ports []int) bool {
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}
