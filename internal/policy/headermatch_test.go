package policy

import (
	"strings"
	"testing"
)

// A header condition sets one of value, absent and notIn; a reader refuses a document whose
// condition sets two, rather than guess which one the writer meant.
func TestValidateHeaderMatch(t *testing.T) {
	tests := map[string]struct {
		h    HeaderMatch
		want string
	}{
		"value":            {HeaderMatch{Name: "X-Plan", Value: "pro"}, ""},
		"absent":           {HeaderMatch{Name: "X-Plan", Absent: true}, ""},
		"notIn":            {HeaderMatch{Name: "X-Plan", NotIn: []string{"basic", "pro"}}, ""},
		"empty value":      {HeaderMatch{Name: "X-Plan"}, ""},
		"absent and value": {HeaderMatch{Name: "X-Plan", Value: "pro", Absent: true}, "more than one"},
		"notIn and value":  {HeaderMatch{Name: "X-Plan", Value: "pro", NotIn: []string{"basic"}}, "more than one"},
		"absent and notIn": {HeaderMatch{Name: "X-Plan", Absent: true, NotIn: []string{"basic"}}, "more than one"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := validDoc()
			d.Policies[0].Rules[0].Match = &Match{Headers: []HeaderMatch{tc.h}}
			err := d.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
