package policy

import (
	"fmt"
	"slices"
)

// LabelSelector selects pods by their labels: the API's metav1.LabelSelector in the rendered
// document, with the same JSON. The readers match it here rather than through
// k8s.io/apimachinery, which would link about 2.6 MB of code and its package initialisation into
// the sidecar for one comparison of labels. Render validates every selector it writes with
// apimachinery (label syntax included); Validate checks what matching relies on.
type LabelSelector struct {
	// MatchLabels are labels a pod must carry with exactly these values.
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// MatchExpressions are requirements a pod's labels must all meet.
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one of a LabelSelector's expressions: Key's value In or NotIn
// Values, or Key Exists or DoesNotExist (Values empty).
type LabelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// The operators of a LabelSelectorRequirement, as in the API.
const (
	SelectorOpIn           = "In"
	SelectorOpNotIn        = "NotIn"
	SelectorOpExists       = "Exists"
	SelectorOpDoesNotExist = "DoesNotExist"
)

// validate reports an expression matching cannot read, as metav1.LabelSelectorAsSelector does.
func (s *LabelSelector) validate() error {
	for _, r := range s.MatchExpressions {
		switch r.Operator {
		case SelectorOpIn, SelectorOpNotIn:
			if len(r.Values) == 0 {
				return fmt.Errorf("key %q: operator %s needs values", r.Key, r.Operator)
			}
		case SelectorOpExists, SelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				return fmt.Errorf("key %q: operator %s takes no values", r.Key, r.Operator)
			}
		default:
			return fmt.Errorf("key %q: %q is not a valid label selector operator", r.Key, r.Operator)
		}
	}
	return nil
}

// Matches reports whether a pod with labels is selected: every MatchLabels pair is among
// them and every expression holds (NotIn holds when the key is absent). A selector with
// neither selects every pod; a nil one, none; an invalid one (see validate), none.
func (s *LabelSelector) Matches(labels map[string]string) bool {
	if s == nil || s.validate() != nil {
		return false
	}
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, r := range s.MatchExpressions {
		v, ok := labels[r.Key]
		var holds bool
		switch r.Operator {
		case SelectorOpIn:
			holds = ok && slices.Contains(r.Values, v)
		case SelectorOpNotIn:
			holds = !ok || !slices.Contains(r.Values, v)
		case SelectorOpExists:
			holds = ok
		case SelectorOpDoesNotExist:
			holds = !ok
		}
		if !holds {
			return false
		}
	}
	return true
}
