package sidecartest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
)

// Seed is a property test's seed: SLUICE_SEED when set (to replay or explore), else fixed, so
// that every run of the suite draws the same traces and its coverage checks cannot depend on
// luck. It logs the seed.
func Seed(t testing.TB, fixed uint64) uint64 {
	t.Helper()
	seed := fixed
	if v, err := strconv.ParseUint(os.Getenv("SLUICE_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (SLUICE_SEED=%d replays it)", seed, seed)
	return seed
}

// RandomFleet gives p a random fleet of 1 to 5 replicas and returns the name of the replica a
// test plays: ranked (p.Pods lists the fleet and the replica is one of them), unnamed
// (p.Replicas only, each replica holds the unnamed share; the name is empty) or not listed
// (the replica is not among p.Pods, so it holds no share). Property tests of the answers
// draw it for each trace.
func RandomFleet(rng *rand.Rand, p *policy.Policy) (podName string) {
	n := 1 + rng.IntN(5)
	p.Pods, p.Replicas = nil, 0
	switch x := rng.IntN(10); {
	case x < 6: // ranked
		for i := range n {
			p.Pods = append(p.Pods, "pod-"+strconv.Itoa(i))
		}
		podName = p.Pods[rng.IntN(n)]
	case x < 9: // unnamed
		p.Replicas = int32(n)
	default: // not listed
		p.Pods = []string{"pod-0"}
		podName = "pod-9"
	}
	p.Replicas = max(p.Replicas, int32(len(p.Pods)))
	return podName
}

// RandomStep is how far a property test moves its fake clock between two requests of a trace
// whose longest window is maxW: none (3 in 10), up to a third of it (5 in 10) or up to three
// of it (2 in 10), so that traces see both busy windows and expired ones.
func RandomStep(rng *rand.Rand, maxW time.Duration) time.Duration {
	switch x := rng.IntN(10); {
	case x < 3:
		return 0
	case x < 8:
		return time.Duration(rng.Int64N(maxW.Milliseconds()/3+1)) * time.Millisecond
	}
	return time.Duration(rng.Int64N(3*maxW.Milliseconds()+1)) * time.Millisecond
}
