package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// holdWire takes every wire token of b, so its sender waits for one and every call queues
// behind it (forceQueue keeps calls off the direct path); the returned func gives them back.
// It holds b.loading meanwhile, as loadScripts does: a script preload taking some tokens
// while this takes the others would wait for ever.
func holdWire(b *batcher) func() {
	b.loading.Lock()
	for range MaxConns {
		b.wire <- struct{}{}
	}
	return func() {
		for range MaxConns {
			<-b.wire
		}
		b.loading.Unlock()
	}
}

// forceQueue makes every call of b queue for a pipeline, as if directMax calls were in
// flight; the returned func undoes it.
func forceQueue(b *batcher) func() {
	b.active.Add(directMax)
	return func() { b.active.Add(-directMax) }
}

// TestQueuedCallBudget: a call queued behind a sender that cannot send ends its wait at its
// budget without a context of its own (Options.Timeout, or the caller's earlier deadline): a
// timeout *Error, matching ErrTimeout and ErrUnavailable; a caller that cancels gets its
// context's error. Once the sender can send again, the Store decides as before.
func TestQueuedCallBudget(t *testing.T) {
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("budget"), Timeout: 50 * time.Millisecond, ExplicitTime: true})
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Minute}
	defer forceQueue(s.batch)()
	release := holdWire(s.batch)

	_, err := s.Take(context.Background(), "a", lim, 1, at(0))
	var se *Error
	if !errors.As(err, &se) || !se.Timeout || !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Take past Options.Timeout: got %v, want a timeout *Error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	_, err = s.Charge(ctx, "a", limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 10, Window: time.Minute}, 1, at(0))
	cancel()
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Charge past the caller's deadline: got %v, want ErrTimeout", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Take(ctx, "a", lim, 1, at(0))
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("canceled Take: got %v, want context.Canceled, not ErrUnavailable", err)
	}

	release()
	// The abandoned calls were not sent: nothing was counted for them.
	s.timeout = testTimeout
	if r := mustTake(t, s, "a", lim, 1, at(0)); !r.Allowed || r.Remaining != 9 {
		t.Fatalf("first Take after the timeouts: %+v, want allowed with 9 remaining", r)
	}
}

// TestPooledCallNoStaleReply: calls abandoned by their callers (budget spent while queued) are
// still completed by the sender later; that must never reach a caller whose call came from the
// pool meanwhile. Callers on keys of their own, each with a cost of its own, check every reply
// against the one decision it can be, while the abandoned calls are being completed.
func TestPooledCallNoStaleReply(t *testing.T) {
	const abandoned, callers, each = 64, 16, 40
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("stale"), Timeout: testTimeout, ExplicitTime: true})
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1000, Window: time.Minute}
	defer forceQueue(s.batch)()

	for round := range 3 {
		release := holdWire(s.batch)
		var wg sync.WaitGroup
		for i := range abandoned {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				defer cancel()
				if _, err := s.Take(ctx, fmt.Sprintf("gone-%d-%d", round, i), lim, 999, at(0)); !errors.Is(err, ErrTimeout) {
					t.Errorf("Take behind a held wire: got %v, want ErrTimeout", err)
				}
			})
		}
		wg.Wait()
		release() // the sender now completes the abandoned calls, while these take pooled ones
		for g := range callers {
			wg.Go(func() {
				for j := range each {
					cost := int64(1 + (g*each+j)%997)
					key := fmt.Sprintf("k-%d-%d-%d", round, g, j)
					r, err := s.Take(context.Background(), key, lim, cost, at(0))
					if err != nil {
						t.Errorf("Take(%s, %d): %v", key, cost, err)
						return
					}
					if !r.Allowed || r.Remaining != lim.Limit-cost {
						t.Errorf("Take(%s, %d) on a fresh key: %+v, want allowed with %d remaining (another call's reply)", key, cost, r, lim.Limit-cost)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	// No abandoned call was sent (each was past its budget when the sender took it).
	for round := range 3 {
		for i := range abandoned {
			if n, err := s.client.Exists(context.Background(), s.Keys(fmt.Sprintf("gone-%d-%d", round, i), lim)[0]).Result(); err != nil || n != 0 {
				t.Fatalf("abandoned call %d-%d was sent (EXISTS %d, %v)", round, i, n, err)
			}
		}
	}
	checkPool(t)
}

// checkPool takes calls from the pool: each must be empty, its done channel drained.
func checkPool(t *testing.T) {
	t.Helper()
	var got []*call
	for range 64 {
		c := getCall()
		if len(c.done) != 0 || c.vals != nil || c.err != nil || c.ctx != nil || c.keys != nil || c.takes != nil || !c.deadline.IsZero() {
			t.Fatalf("pooled call not reset: %+v (done holds %d)", c, len(c.done))
		}
		got = append(got, c)
	}
	for _, c := range got {
		c.recycle()
	}
}

// TestCallRecycle: recycle empties a call whose reply was received and keeps its channel and
// timer; a recycled call's timer does not fire for its last user; a reply decoded into the
// call's buf is handed over in a copy, untouched by the call's next use.
func TestCallRecycle(t *testing.T) {
	c := getCall()
	done, timer := c.done, c.timer
	c.ctx, c.deadline, c.nowArg, c.keys = context.Background(), time.Now(), "1", []string{"k"}
	c.timer.Reset(time.Millisecond)
	c.finish([]int64{1}, errReply)
	<-c.done
	vals, err := c.reply(nil)
	if len(vals) != 1 || !errors.Is(err, errReply) {
		t.Fatalf("reply: %v, %v", vals, err)
	}
	if c.done != done || c.timer != timer || len(c.done) != 0 || c.vals != nil || c.err != nil || c.ctx != nil || c.nowArg != "" || c.keys != nil || c.buf != [requestFields]int64{} {
		t.Fatalf("recycled call: %+v", c)
	}
	select {
	case <-timer.C:
		t.Fatal("a recycled call's stopped timer fired")
	case <-time.After(5 * time.Millisecond):
	}

	want := [requestFields]int64{1, 2, 3, 4, 5, 6, 7, 8}
	var one [requestFields]int64
	for _, into := range []*[requestFields]int64{nil, &one} {
		c := &call{done: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
		c.buf = want
		c.finish(c.buf[:], nil)
		<-c.done
		vals, err := c.reply(into)
		if err != nil || [requestFields]int64(vals) != want {
			t.Fatalf("reply into %p: %v, %v", into, vals, err)
		}
		if &vals[0] == &c.buf[0] || (into != nil && &vals[0] != &into[0]) {
			t.Fatalf("reply into %p: not copied out of the call's buf", into)
		}
		c.buf = [requestFields]int64{} // the call's next use
		if [requestFields]int64(vals) != want {
			t.Fatalf("reply into %p changed by the call's reuse: %v", into, vals)
		}
	}
}
