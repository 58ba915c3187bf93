package rls_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/policy"
)

// TestLeases decides a leased descriptor rule with two replicas sharing redis-server: they
// admit exactly the limit between them in a window (a lease is units of the shared limit,
// never more), each spends most of its decisions from its leases without a store call, and a
// check (hits_addend 0) spends nothing.
func TestLeases(t *testing.T) {
	r := descRule("leased", "FixedWindow", 100, [][2]string{{"generic_key", "api"}}, "generic_key")
	r.Lease = &policy.Lease{MaxAgeMs: 10_000, MaxUnits: 20}
	e, store := start(t, domainPolicy("shop", policy.FailureLocal, []string{"rls-a", "rls-b"}, r))
	e.leases = true
	a, b := e.replica(t, "rls-a", store), e.replica(t, "rls-b", store)
	api := desc(0, "generic_key", "api")

	admitted := 0
	for i := range 150 {
		s := a
		if i%3 == 2 {
			s = b
		}
		if s.ask(t, "edge", 0, api).OverallCode == ok {
			admitted++
		}
	}
	// Leases may leave units unspent in the other replica's lease (at most MaxUnits each), never
	// admit more than the limit.
	if admitted > 100 || admitted < 100-2*20 {
		t.Fatalf("%d admitted of 150 in one window, limit 100 (leases of at most 20 units)", admitted)
	}
	for _, s := range []*env{a, b} {
		st := s.lease.Stats()
		if st.Leases == 0 || st.StoreCalls*2 > st.Decisions {
			t.Fatalf("lease stats %+v: want leases, and at most one store call in 2 decisions", st)
		}
	}
	before := a.lease.Stats()
	check := desc(0, "generic_key", "api")
	check.HitsAddend = wrapperspb.UInt64(0)
	a.ask(t, "edge", 0, check)
	if after := a.lease.Stats(); after.Decisions != before.Decisions {
		t.Fatalf("a check (hits_addend 0) went to the lease engine: %+v then %+v", before, after)
	}
}
