package simulate_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/simulate"
)

// Issue 21's scenario: key A's denials by per-key charge per-ip nothing, so key B gets 2 of 3.
func TestSimulateRulesIssue21(t *testing.T) {
	var rules []simulate.Rule
	for _, s := range []string{"per-ip=FixedWindow,5,1h", "per-key=FixedWindow,2,1h", "audit=FixedWindow,1,1h,shadow"} {
		r, err := simulate.ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	trace := `1000 per-ip=1.2.3.4 per-key=A audit=x
1001 per-ip=1.2.3.4 per-key=A
1002 per-ip=1.2.3.4 per-key=A audit=x
1003 per-ip=1.2.3.4 per-key=A

2000 per-ip=1.2.3.4 per-key=B audit=x
2001 per-ip=1.2.3.4 per-key=B
2002 per-ip=1.2.3.4 per-key=B
`
	want := `1000 allow charged=per-ip,per-key,audit
1001 allow charged=per-ip,per-key
1002 deny by=per-key charged=-
1003 deny by=per-key charged=-
2000 allow charged=per-ip,per-key
2001 allow charged=per-ip,per-key
2002 deny by=per-key charged=-
allowed=4 denied=3
`
	var out strings.Builder
	if err := simulate.ReplayRules(strings.NewReader(trace), &out, limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), rules); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("got\n%swant\n%s", out.String(), want)
	}
}

func TestSimulateRulesBadInput(t *testing.T) {
	for _, s := range []string{"x", "a=FixedWindow,5", "a=FixedWindow,x,1h", "a=Nope,5,1h", "a=FixedWindow,5,1h,loud"} {
		if _, err := simulate.ParseRule(s); err == nil {
			t.Errorf("ParseRule(%q) succeeded", s)
		}
	}
	r, _ := simulate.ParseRule("a=FixedWindow,5,1h")
	for _, trace := range []string{"x a=1", "5 b=1", "5 a", "5 a=1\n4 a=1"} {
		var out strings.Builder
		if err := simulate.ReplayRules(strings.NewReader(trace), &out, limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), []simulate.Rule{r}); err == nil {
			t.Errorf("trace %q: no error", trace)
		}
	}
}
