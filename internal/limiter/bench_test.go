package limiter

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The benchmarks compare MemoryStore.Take with golang.org/x/time/rate's Limiter.AllowN, the
// standard single-limiter reference, on one key and spread over 100k keys. Time advances 1µs
// per operation, so a bucket refills and windows roll as they do under load. Compare runs with
// benchstat; no test asserts a time.

const benchKeys = 100_000

var benchKeyNames = func() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("10.0.%d.%d", i/256, i%256)
	}
	return keys
}()

// warmUp puts every key in the store with state built over the last second, so that the
// benchmark measures the steady state (a log's buffer at its size), not the first requests.
func warmUp(b *testing.B, m *MemoryStore, lim Limit, start time.Time) {
	for round := 20; round > 0; round-- {
		for _, k := range benchKeyNames {
			if _, err := m.Take(context.Background(), k, lim, 1, start.Add(-time.Duration(round)*50*time.Millisecond)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkMemoryStore(b *testing.B) {
	for _, lim := range Variants(100, time.Second, 0, 100*time.Millisecond) {
		b.Run(lim.Name()+"/one-key", func(b *testing.B) {
			m, ctx, start := NewMemoryStore(MemoryStoreOptions{}), context.Background(), time.UnixMilli(t0)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := m.Take(ctx, "10.0.0.1", lim, 1, start.Add(time.Duration(i)*time.Microsecond)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(lim.Name()+"/one-key/parallel", func(b *testing.B) {
			m, ctx, start := NewMemoryStore(MemoryStoreOptions{}), context.Background(), time.UnixMilli(t0)
			var clock atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					now := start.Add(time.Duration(clock.Add(1)) * time.Microsecond)
					if _, err := m.Take(ctx, "10.0.0.1", lim, 1, now); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		b.Run(lim.Name()+"/100k-keys", func(b *testing.B) {
			m, ctx, start := NewMemoryStore(MemoryStoreOptions{MaxKeys: 2 * benchKeys}), context.Background(), time.UnixMilli(t0)
			warmUp(b, m, lim, start)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := m.Take(ctx, benchKeyNames[i%benchKeys], lim, 1, start.Add(time.Duration(i)*time.Microsecond)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(lim.Name()+"/100k-keys/parallel", func(b *testing.B) {
			m, ctx, start := NewMemoryStore(MemoryStoreOptions{MaxKeys: 2 * benchKeys}), context.Background(), time.UnixMilli(t0)
			warmUp(b, m, lim, start)
			var clock atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := clock.Add(1)
					now := start.Add(time.Duration(i) * time.Microsecond)
					if _, err := m.Take(ctx, benchKeyNames[i%benchKeys], lim, 1, now); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkXTimeRate is the reference: rate.Limiter.AllowN at the same rate and burst (100 per
// second). "100k-keys" indexes a slice of limiters, a lower bound for any keyed store (no
// hashing, no map, no eviction).
func BenchmarkXTimeRate(b *testing.B) {
	b.Run("one-key", func(b *testing.B) {
		l, start := rate.NewLimiter(100, 100), time.UnixMilli(t0)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			l.AllowN(start.Add(time.Duration(i)*time.Microsecond), 1)
		}
	})
	b.Run("one-key/parallel", func(b *testing.B) {
		l, start := rate.NewLimiter(100, 100), time.UnixMilli(t0)
		var clock atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.AllowN(start.Add(time.Duration(clock.Add(1))*time.Microsecond), 1)
			}
		})
	})
	limiters := make([]*rate.Limiter, benchKeys)
	for i := range limiters {
		limiters[i] = rate.NewLimiter(100, 100)
	}
	b.Run("100k-keys", func(b *testing.B) {
		start := time.UnixMilli(t0)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			limiters[i%benchKeys].AllowN(start.Add(time.Duration(i)*time.Microsecond), 1)
		}
	})
	b.Run("100k-keys/parallel", func(b *testing.B) {
		start := time.UnixMilli(t0)
		var clock atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := clock.Add(1)
				limiters[i%benchKeys].AllowN(start.Add(time.Duration(i)*time.Microsecond), 1)
			}
		})
	})
}

// BenchmarkTransition is the algorithms alone, without the store: the floor under Take.
func BenchmarkTransition(b *testing.B) {
	for _, lim := range Variants(100, time.Second, 0, 100*time.Millisecond) {
		b.Run(lim.Name(), func(b *testing.B) {
			s := newState(lim.Algorithm)
			b.ReportAllocs()
			for i := int64(0); b.Loop(); i++ {
				s.Take(lim, 1, t0+i/1000)
			}
		})
	}
}
