package keys

import (
	"net/http/httptest"
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
)

// A header condition matches a present value exactly, an absent header, or a value that is
// none of a list (an absent header included).
func TestMatchHeaderConditions(t *testing.T) {
	conds := map[string]policy.HeaderMatch{
		"value":  {Name: "X-Plan", Value: "pro"},
		"absent": {Name: "X-Plan", Absent: true},
		"notIn":  {Name: "X-Plan", NotIn: []string{"basic", "enterprise", "pro"}},
	}
	tests := []struct {
		name   string
		header map[string]string
		want   map[string]bool
	}{
		{"no header", nil, map[string]bool{"value": false, "absent": true, "notIn": true}},
		{"listed value", map[string]string{"x-plan": "pro"}, map[string]bool{"value": true, "absent": false, "notIn": false}},
		{"other listed value", map[string]string{"X-PLAN": "basic"}, map[string]bool{"value": false, "absent": false, "notIn": false}},
		{"unlisted value", map[string]string{"X-Plan": "trial"}, map[string]bool{"value": false, "absent": false, "notIn": true}},
		{"empty value", map[string]string{"X-Plan": ""}, map[string]bool{"value": false, "absent": false, "notIn": true}},
		{"value in another case", map[string]string{"X-Plan": "PRO"}, map[string]bool{"value": false, "absent": false, "notIn": true}},
		{"another header only", map[string]string{"X-Tier": "pro"}, map[string]bool{"value": false, "absent": true, "notIn": true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			for cond, h := range conds {
				m := CompileMatch(&policy.Match{Headers: []policy.HeaderMatch{h}})
				if got := m.Matches(r); got != tc.want[cond] {
					t.Errorf("%s: Matches = %v, want %v", cond, got, tc.want[cond])
				}
			}
		})
	}
}
