package limiter

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"
)

// maxInlineTakes is the most takes a MemoryStore request decides without allocating (but for
// new keys and growing logs, as Take).
const maxInlineTakes = 8

var _ RequestStore = (*MemoryStore)(nil)

// TakeRequest implements RequestStore: it decides the request under one consistent view of
// its keys, atomically. It locks the shards of all the request's keys (in ascending order, so
// that concurrent requests cannot deadlock), applies each take in order, keeping what it needs
// to undo it exactly, and if an enforced take denies, undoes them all in reverse order: the
// entries are then bit for bit what they were. Keys the request creates are inserted only when
// it is admitted (and subject to MaxKeys and MaxLogEntries as in Take: making room for them
// can drop other keys, those of the same request included). now, the costs and the Limits are
// checked as in Take, before anything is decided.
func (m *MemoryStore) TakeRequest(_ context.Context, takes []Take, now time.Time, res []Result) (bool, error) {
	nowMs := now.UnixMilli()
	if nowMs < 0 || nowMs > MaxNowMs {
		return false, fmt.Errorf("%w: %s is outside the Unix epoch .. %d ms", ErrInvalidTime, now, MaxNowMs)
	}
	if err := ValidateRequest(takes, res); err != nil {
		return false, err
	}
	var (
		lockBuf  [maxInlineTakes]int
		touchBuf [maxInlineTakes]touched
		undoBuf  [maxInlineTakes]undo
	)
	res = res[:len(takes)]
	locks, touch, undos := lockBuf[:0], touchBuf[:0], undoBuf[:0]
	if len(takes) > maxInlineTakes {
		locks = make([]int, 0, len(takes))
		touch = make([]touched, 0, len(takes))
		undos = make([]undo, 0, len(takes))
	}
	locks = m.lockShards(takes, locks)

	admitted := true
	for i := range takes {
		tk := &takes[i]
		var j int
		touch, j = m.touch(touch, tk.Key, tk.Limit, nowMs)
		t := &touch[j]
		if !t.isNew { // a new entry is dropped, not undone, when the request is denied
			undos = append(undos, undo{})
			undos[len(undos)-1].save(t.e)
		}
		if t.e.lim != tk.Limit { // a key decided once per request: touch checked its expiry
			t.e.adapt(tk.Limit)
		}
		if tk.Check {
			var u undo
			u.save(t.e)
			res[i] = t.e.take(tk.N, nowMs)
			u.restore()
		} else {
			res[i] = t.e.take(tk.N, nowMs)
		}
		if !res[i].Allowed && !tk.Shadow { //nolint:gosec // res holds len(takes) results (checked above)
			admitted = false
		}
	}
	if admitted {
		commit(touch, nowMs)
	} else {
		for k := len(undos) - 1; k >= 0; k-- {
			undos[k].restore()
		}
	}
	for _, si := range locks {
		m.shards[si].mu.Unlock()
	}
	return admitted, nil
}

// lockShards locks the shards of the takes' keys, each once, in ascending order, and returns
// their indices (appended to locks) for unlocking.
func (m *MemoryStore) lockShards(takes []Take, locks []int) []int {
	for i := range takes {
		si := int(maphash.String(m.seed, takes[i].Key) & m.mask)
		j := len(locks)
		for j > 0 && locks[j-1] > si {
			j--
		}
		if j > 0 && locks[j-1] == si {
			continue
		}
		locks = append(locks, 0)
		copy(locks[j+1:], locks[j:])
		locks[j] = si
	}
	for _, si := range locks {
		m.shards[si].mu.Lock()
	}
	return locks
}

// touch returns touch with the request's entry for key and its index: the entry an earlier
// take touched, the shard's (its shard locked) unless it is expiredFor lim at now, or a new one.
func (m *MemoryStore) touch(touch []touched, key string, lim Limit, now int64) ([]touched, int) {
	for j := range touch {
		if touch[j].key == key {
			return touch, j
		}
	}
	sh := &m.shards[maphash.String(m.seed, key)&m.mask]
	t := touched{key: key, sh: sh, e: sh.entries[key]}
	if t.e != nil && t.e.expiredFor(lim, now) {
		t.e, t.replaces = nil, true // dropped if the request is admitted
	}
	if t.e == nil {
		t.e, t.isNew = new(memoryEntry), true
	}
	t.logBefore = t.e.logEntries()
	return append(touch, t), len(touch)
}

// commit keeps an admitted request's changes: it accounts for the logs' growth and inserts
// the new keys, under the bounds as Take does.
func commit(touch []touched, nowMs int64) {
	// Account for every existing log's growth before anything is shed or evicted, so that a
	// drop subtracts what the shard counted.
	for j := range touch {
		if t := &touch[j]; !t.isNew {
			t.sh.logEntries += t.e.logEntries() - t.logBefore
		}
	}
	for j := range touch {
		if t := &touch[j]; !t.isNew && t.e.logEntries() > t.logBefore {
			t.sh.shed(t.key)
		}
	}
	for j := range touch {
		if t := &touch[j]; t.replaces {
			t.sh.drop(t.key, t.sh.entries[t.key])
		}
		// A key the request leaves fresh need not be remembered, as in Take.
		if t := &touch[j]; t.isNew && t.e.expiresAt > nowMs {
			t.sh.makeRoom(nowMs)
			t.sh.entries[t.key] = t.e
			t.sh.logGrew(t.key, t.e.logEntries())
		}
	}
}

// touched is an entry a request decides on.
type touched struct {
	key       string
	sh        *memoryShard
	e         *memoryEntry
	isNew     bool // created for the request, inserted when it is admitted
	replaces  bool // isNew in place of an entry expiredFor the take's limit, dropped when admitted
	logBefore int  // e's log capacity before the request
}

// undo restores an entry to what it was before one take. memoryEntry is a value but for its
// log. A log take only moves head and n and changes sum (pruning), then writes one ring slot
// (merging into the newest entry, or pushing into the slot after it, or into slot 0 of an
// emptied log) or replaces the ring (growing it, which leaves the old ring as it was). So the
// log's header fields and those three slots' values restore it exactly.
type undo struct {
	e      *memoryEntry
	saved  memoryEntry
	log    SlidingWindowLogState // *saved.log, when saved.log != nil
	slots  [3]logSlot
	nslots int
}

type logSlot struct {
	i int
	v LogEntry
}

func (u *undo) save(e *memoryEntry) {
	u.e, u.saved, u.nslots = e, *e, 0
	l := e.log
	if l == nil {
		return
	}
	u.log = *l
	if size := len(l.ring); size > 0 {
		u.keepSlot(0)
		if l.n > 0 {
			u.keepSlot((l.head + l.n - 1) % size) // the newest entry
		}
		u.keepSlot((l.head + l.n) % size) // the slot after it
	}
}

func (u *undo) keepSlot(i int) {
	u.slots[u.nslots] = logSlot{i: i, v: u.log.ring[i]}
	u.nslots++
}

func (u *undo) restore() {
	*u.e = u.saved
	if l := u.saved.log; l != nil {
		*l = u.log
		for _, s := range u.slots[:u.nslots] {
			l.ring[s.i] = s.v
		}
	}
}
