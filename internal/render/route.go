package render

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/sluice-dev/sluice/internal/policy"
)

// RouteMatches compiles the matches of an HTTPRoute rule, which a policy attached to the route
// adds to each of its HTTP rules: a request counts when it meets one of them. A rule without
// matches matches every request (Gateway API's default, a path prefix of /). Regular
// expressions and query parameters, which the sidecar does not match, are refused.
func RouteMatches(rule gatewayv1.HTTPRouteRule) ([]policy.RouteMatch, error) {
	matches := rule.Matches
	if len(matches) == 0 {
		matches = []gatewayv1.HTTPRouteMatch{{}}
	}
	out := make([]policy.RouteMatch, 0, len(matches))
	for _, m := range matches {
		rm, err := routeMatch(m)
		if err != nil {
			return nil, err
		}
		out = append(out, rm)
	}
	return out, nil
}

func routeMatch(m gatewayv1.HTTPRouteMatch) (policy.RouteMatch, error) {
	var out policy.RouteMatch
	if p := m.Path; p != nil && p.Value != nil {
		t := gatewayv1.PathMatchPathPrefix
		if p.Type != nil {
			t = *p.Type
		}
		switch t {
		case gatewayv1.PathMatchExact:
			out.PathExact = *p.Value
		case gatewayv1.PathMatchPathPrefix:
			if *p.Value != "/" {
				out.PathPrefix = *p.Value
			}
		default:
			return out, fmt.Errorf("path match type %s is not supported (Exact and PathPrefix are)", t)
		}
	}
	if m.Method != nil {
		out.Method = string(*m.Method)
	}
	for _, h := range m.Headers {
		if h.Type != nil && *h.Type != gatewayv1.HeaderMatchExact {
			return out, fmt.Errorf("header match type %s is not supported (Exact is)", *h.Type)
		}
		out.Headers = append(out.Headers, policy.HeaderMatch{Name: canonicalHeader(string(h.Name)), Value: h.Value})
	}
	if len(m.QueryParams) > 0 {
		return out, errors.New("query parameter matches are not supported")
	}
	slices.SortFunc(out.Headers, func(a, b policy.HeaderMatch) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
