package simulate

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// trailing's maximum is the most times in any interval (t-w, t], checked by brute force.
func TestTrailingMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		w := 1 + rng.Int64N(50)
		times := make([]int64, rng.IntN(40))
		for k := range times {
			times[k] = rng.Int64N(200)
		}
		want := 0
		for t := int64(0); t < 260; t++ {
			n := 0
			for _, a := range times {
				if t-w < a && a <= t {
					n++
				}
			}
			want = max(want, n)
		}
		steps, got := trailing(times, w)
		if got != want {
			t.Fatalf("times %v, w %d: max %d, want %d", times, w, got, want)
		}
		if len(times) > 0 && steps[len(steps)-1][1] != 0 {
			t.Fatalf("times %v, w %d: the count ends at %d, not 0", times, w, steps[len(steps)-1][1])
		}
	}
	// The edges: an admission leaves the window exactly w ms later.
	if _, got := trailing([]int64{0, 0, 999, 1000}, 1000); got != 3 {
		t.Errorf("max %d, want 3", got)
	}
}

func TestCounts(t *testing.T) {
	got := counts([]int64{100, 100, 199, 200, 450, 99}, 100, 100, 3)
	if fmt.Sprint(got) != "[3 1 0]" {
		t.Errorf("counts %v, want [3 1 0]", got)
	}
}

func TestSecondTicks(t *testing.T) {
	var labels []string
	for _, tk := range (secondTicks{}).Ticks(0, 4.9) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0 0.5 1 1.5 2 2.5 3 3.5 4 4.5" {
		t.Errorf("labels %q", got)
	}
}
