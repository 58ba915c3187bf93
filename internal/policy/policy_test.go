package policy

import (
	"testing"
)

// TestShareSumsToTheTotal: the ranked shares of n pods sum to the total exactly and differ by
// at most one, for totals below, at and above n.
func TestShareSumsToTheTotal(t *testing.T) {
	for _, total := range []int64{0, 1, 2, 5, 6, 7, 99, 100, 101, 1000, 100_000_000} {
		for _, n := range []int32{1, 2, 3, 4, 6, 7, 20, 64, 500, 10_000} {
			var sum, lo, hi int64 = 0, total, 0
			for rank := range int(n) {
				s := Share(total, n, rank)
				sum += s
				lo, hi = min(lo, s), max(hi, s)
			}
			if sum != total || hi-lo > 1 {
				t.Errorf("Share(%d, %d, ·) sums to %d (min %d, max %d), want %d", total, n, sum, lo, hi, total)
			}
		}
	}
	if Share(6, 4, -1) != 0 || Share(6, 4, 4) != 0 || Share(6, 0, 0) != 0 {
		t.Error("a rank outside 0..n-1 holds units")
	}
}

func TestPodShare(t *testing.T) {
	ranked := Policy{Replicas: 4, Pods: []string{"a", "b", "c", "d"}}
	tests := map[string]struct {
		p     Policy
		pod   string
		total int64
		want  int64
	}{
		"6 over 4, rank 0":       {ranked, "a", 6, 2},
		"6 over 4, rank 1":       {ranked, "b", 6, 2},
		"6 over 4, rank 2":       {ranked, "c", 6, 1},
		"6 over 4, rank 3":       {ranked, "d", 6, 1},
		"2 over 4, rank 1":       {ranked, "b", 2, 1},
		"2 over 4, rank 2":       {ranked, "c", 2, 0},
		"not listed":             {ranked, "e", 6, 0},
		"no name":                {ranked, "", 6, 0},
		"no ready pods":          {Policy{Pods: []string{}}, "a", 6, 0},
		"unnamed, 4 replicas":    {Policy{Replicas: 4}, "a", 6, 1},
		"unnamed, 0 replicas":    {Policy{}, "", 6, 6},
		"unnamed, more than all": {Policy{Replicas: 7}, "", 6, 0},
	}
	for name, tc := range tests {
		if got := tc.p.PodShare(tc.total, tc.pod); got != tc.want {
			t.Errorf("%s: PodShare(%d, %q) = %d, want %d", name, tc.total, tc.pod, got, tc.want)
		}
	}
}

func TestPathHasPrefix(t *testing.T) {
	tests := []struct {
		path, prefix string
		want         bool
	}{
		{"/api", "/api", true},
		{"/api/", "/api", true},
		{"/api/x", "/api", true},
		{"/api/x", "/api/", true},
		{"/api", "/api/", true},
		{"/apix", "/api", false},
		{"/ap", "/api", false},
		{"/", "/", true},
		{"/anything", "/", true},
		{"/a/b/c", "/a/b", true},
		{"/a/bc", "/a/b", false},
	}
	for _, tc := range tests {
		if got := PathHasPrefix(tc.path, tc.prefix); got != tc.want {
			t.Errorf("PathHasPrefix(%q, %q) = %v, want %v", tc.path, tc.prefix, got, tc.want)
		}
	}
}
