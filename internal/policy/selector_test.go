package policy_test

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sluice-dev/sluice/internal/policy"
)

// TestLabelSelectorAsAPI checks the document's selector against the API's over random
// selectors and label sets: the same JSON, the same pods selected, the same selectors refused.
func TestLabelSelectorAsAPI(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 1))
	pick := func(from ...string) string { return from[rng.IntN(len(from))] }
	someOf := func(from ...string) []string {
		var out []string
		for range rng.IntN(3) {
			out = append(out, pick(from...))
		}
		return out
	}
	for i := range 20000 {
		api := &metav1.LabelSelector{}
		for range rng.IntN(3) {
			if api.MatchLabels == nil {
				api.MatchLabels = map[string]string{}
			}
			api.MatchLabels[pick("app", "tier", "env")] = pick("web", "api", "")
		}
		for range rng.IntN(3) {
			api.MatchExpressions = append(api.MatchExpressions, metav1.LabelSelectorRequirement{
				Key:      pick("app", "tier", "env"),
				Operator: metav1.LabelSelectorOperator(pick("In", "NotIn", "Exists", "DoesNotExist", "Near")),
				Values:   someOf("web", "api", ""),
			})
		}
		raw, err := json.Marshal(api)
		if err != nil {
			t.Fatal(err)
		}
		var doc policy.LabelSelector
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		if again, _ := json.Marshal(&doc); string(again) != string(raw) {
			t.Fatalf("JSON %s read and written again as %s", raw, again)
		}
		pod := map[string]string{}
		for _, k := range someOf("app", "tier", "env") {
			pod[k] = pick("web", "api", "")
		}
		sel, apiErr := metav1.LabelSelectorAsSelector(api)
		p := policy.Policy{Selector: &doc}
		docErr := validSelector(p)
		if (apiErr != nil) != (docErr != nil) {
			t.Fatalf("case %d, %s: the API says %v, the document %v", i, raw, apiErr, docErr)
		}
		want := apiErr == nil && sel.Matches(labels.Set(pod))
		if got := p.Selects(pod); got != want {
			t.Fatalf("case %d, %s on pod %v: Selects %v, the API's selector %v", i, raw, pod, got, want)
		}
	}
	if (policy.Policy{}).Selects(map[string]string{"app": "web"}) {
		t.Error("a policy without a selector selects a pod")
	}
}

// validSelector is the selector's part of p.Validate: nil or an error that names it.
func validSelector(p policy.Policy) error {
	// Validate checks the selector before the fields p leaves empty.
	if err := p.Validate(); err != nil && strings.HasPrefix(err.Error(), "selector:") {
		return err
	}
	return nil
}
