package keys

import (
	"crypto/sha256"
	"strconv"
	"testing"
)

// The token cache holds at most its size, keeps the tokens in use, and forgets on clear.
func TestTokenCacheIsBounded(t *testing.T) {
	c := newTokenCache(4)
	sum := func(i int) [sha256.Size]byte { return sha256.Sum256([]byte(strconv.Itoa(i))) }
	hot := &Identity{}
	c.add(sum(-1), hot)
	for i := range 100 {
		c.add(sum(i), &Identity{})
		if c.get(sum(-1)) != hot {
			t.Fatalf("after %d adds the token in use is gone", i+1)
		}
		if n := len(c.cur) + len(c.prev); n > 4 {
			t.Fatalf("after %d adds the cache holds %d, over 4", i+1, n)
		}
	}
	if c.get(sum(0)) != nil {
		t.Error("the first token added is still held")
	}
	c.clear()
	if c.get(sum(-1)) != nil || c.get(sum(99)) != nil {
		t.Error("clear kept tokens")
	}
}
