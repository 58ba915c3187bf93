package policyfile

import (
	"strings"
	"testing"
)

// valid is a policy every case below changes in one place.
const valid = `apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: api}
spec:
  podSelector: {}
  rules:
  - name: r
    key: [{clientIP: {}}]
    algorithm: FixedWindow
    limit: 1
    window: 1s
`

// Strict field validation, as kubectl apply asks for by default: a field the CRD does not
// declare fails the document with its path, instead of vanishing in pruning.
func TestDecodeRejectsUnknownFields(t *testing.T) {
	tests := map[string]struct {
		old, new string
		want     []string // parts of the error, in order
		notWant  string
	}{
		"a typo of key": {
			"    key: [{clientIP: {}}]\n", "    keys: [{clientIP: {}}]\n",
			[]string{`RateLimitPolicy.sluice.dev "api" cannot be handled as a RateLimitPolicy: strict decoding error: unknown field "spec.rules[0].keys"`},
			"Required value", // strict decoding fails before validation, as on the API server
		},
		"a field of a newer version": {
			"  podSelector: {}\n", "  podSelector: {}\n  lease: 5s\n",
			[]string{`strict decoding error: unknown field "spec.lease"`}, "",
		},
		"nested in a key part": {
			"    key: [{clientIP: {}}]\n", "    key: [{clientIP: {}}, {header: {name: X-Key, default: anon}}]\n",
			[]string{`unknown field "spec.rules[0].key[1].header.default"`}, "",
		},
		"every unknown field is named": {
			"    window: 1s\n", "    window: 1s\n    quota: 1s\n    keys: []\n",
			[]string{`unknown field "spec.rules[0].keys"`, `unknown field "spec.rules[0].quota"`}, "",
		},
		"at the top": {
			"kind: RateLimitPolicy\n", "kind: RateLimitPolicy\nextra: 1\n",
			[]string{`unknown field "extra"`}, "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			doc := strings.Replace(valid, tc.old, tc.new, 1)
			if doc == valid {
				t.Fatalf("%q is not in the policy", tc.old)
			}
			_, err := Decode(strings.NewReader(doc), "policy.yaml")
			if err == nil {
				t.Fatalf("accepted:\n%s", doc)
			}
			msg, at := err.Error(), 0
			for _, w := range tc.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error %q does not contain %q (after offset %d)", msg, w, at)
				}
				at += i + len(w)
			}
			if tc.notWant != "" && strings.Contains(msg, tc.notWant) {
				t.Errorf("error %q contains %q", msg, tc.notWant)
			}
		})
	}
}

func TestDecodeAcceptsTheBasePolicy(t *testing.T) {
	ps, err := Decode(strings.NewReader(valid), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Name != "api" || len(ps[0].Spec.Rules) != 1 {
		t.Fatalf("decoded %+v", ps)
	}
}
