// Package convert turns other rate limiters' configurations into RateLimitPolicies.
//
// EnvoyRatelimit converts envoyproxy/ratelimit's configuration files (one domain each: a tree
// of descriptors, each with a key, an optional value and an optional rate_limit) into one
// policy per domain whose descriptor rules decide every descriptor as that server would:
//
//   - Each descriptor with a rate_limit becomes a FixedWindow rule matching the path of
//     entries that leads to it (match.descriptors), with its requests_per_unit as limit (0
//     denies every request) and its unit as window (second, minute, hour, day).
//   - envoyproxy/ratelimit picks one descriptor per level, the most specific: an entry's
//     exact value, else the first wildcard value (value*) its value starts with, else the
//     key without value. A rule therefore excludes, with notIn, the values its more specific
//     siblings take: a key-only entry every sibling value and wildcard, a wildcard the exact
//     values it covers and the wildcards listed before it. An `unlimited: true` descriptor
//     becomes no rule, and its value is excluded from its siblings all the same: it is
//     unlimited.
//   - Its counters are per descriptor: the rule keys on every entry, except a wildcard
//     entry with share_threshold (one counter for every value it matches).
//   - shadow_mode becomes mode: Shadow; the rate limit's name, when it is a DNS label, the
//     rule's name. detailed_metric is accepted (it changes only the peer's metric names;
//     Sluice's metrics are per rule) and reported as a note.
//   - replaces and quota_mode, and units longer than a day, have no equivalent: the
//     conversion fails naming the key.
package convert

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// Options shape the policies EnvoyRatelimit writes.
type Options struct {
	// Namespace is the policies' namespace; empty leaves it to kubectl apply -n.
	Namespace string
	// FailureMode is each policy's failureMode while Redis cannot decide; Local when empty.
	FailureMode v1alpha1.FailureMode
}

// File is one envoyproxy/ratelimit configuration file: its name (for messages) and content.
type File struct {
	Name    string
	Content []byte
}

// Result is a conversion: one policy per domain, in the order the files give them, and notes
// on what was accepted without an effect in Sluice.
type Result struct {
	Policies []v1alpha1.RateLimitPolicy
	Notes    []string
}

// node is one descriptor of the tree, as the file gives it.
type node struct {
	path     string // where it is, for messages: descriptors[0].descriptors[2]
	key      string
	value    string
	limit    *rateLimit
	shadow   bool
	shared   bool // share_threshold
	children []*node
}

type rateLimit struct {
	name      string
	unit      string
	perUnit   int64
	unlimited bool
}

// maxRules is the API's most rules in one policy.
const maxRules = 64

var (
	descriptorKeys = []string{"key", "value", "rate_limit", "shadow_mode", "detailed_metric", "share_threshold", "descriptors", "replaces", "quota_mode"}
	rateLimitKeys  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces"}
	windows        = map[string]string{"second": "1s", "minute": "1m", "hour": "1h", "day": "24h"}
	dnsLabel       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dashes         = regexp.MustCompile(`-+`)
)

// EnvoyRatelimit converts files, each an envoyproxy/ratelimit configuration, into
// RateLimitPolicies (see the package documentation). Files of the same domain are merged, as
// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does. An error names the file and the key it
// cannot convert.
func EnvoyRatelimit(files []File, opts Options) (*Result, error) {
	out := &Result{}
	var order []string
	roots := map[string][]*node{}
	for _, f := range files {
		docs, err := split(f.Content)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		for _, doc := range docs {
			domain, tree, notes, err := parse(doc)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			for _, n := range notes {
				out.Notes = append(out.Notes, f.Name+": "+n)
			}
			if _, seen := roots[domain]; !seen {
				order = append(order, domain)
			}
			roots[domain] = append(roots[domain], tree...)
		}
	}
	for _, domain := range order {
		rules, err := rulesOf(roots[domain], map[string]bool{})
		if err != nil {
			return nil, fmt.Errorf("domain %s: %w", domain, err)
		}
		if len(rules) == 0 {
			return nil, fmt.Errorf("domain %s: no descriptor has a rate limit, so nothing is limited (a policy needs a rule)", domain)
		}
		// A policy holds at most 64 rules: a larger domain takes several policies, each
		// serving the domain (every matching rule of each applies).
		for i := 0; i < len(rules); i += maxRules {
			p := newPolicy(domain, opts)
			if i > 0 {
				p.Name = fmt.Sprintf("%s-%d", p.Name[:min(len(p.Name), 59)], i/maxRules+1)
			}
			p.Spec.Rules = rules[i:min(i+maxRules, len(rules))]
			out.Policies = append(out.Policies, *p)
		}
	}
	return out, nil
}

func newPolicy(domain string, opts Options) *v1alpha1.RateLimitPolicy {
	fm := opts.FailureMode
	if fm == "" {
		fm = v1alpha1.FailureMode("Local")
	}
	return &v1alpha1.RateLimitPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RateLimitPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: objectName(domain), Namespace: opts.Namespace},
		Spec:       v1alpha1.RateLimitPolicySpec{Domain: domain, FailureMode: fm},
	}
}

// split cuts a YAML stream into its documents, dropping empty ones, as policyfile.Decode reads
// manifests.
func split(content []byte) ([][]byte, error) {
	var docs [][]byte
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(content)))
	for {
		d, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(d)) != 0 {
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		return nil, errors.New("no configuration in the file")
	}
	return docs, nil
}

// parse reads one configuration document: its domain and descriptor tree, checking every key.
func parse(doc []byte) (domain string, roots []*node, notes []string, err error) {
	var top map[string]any
	if err := yaml.Unmarshal(doc, &top); err != nil {
		return "", nil, nil, fmt.Errorf("not YAML: %w", err)
	}
	for k := range top {
		if k != "domain" && k != "descriptors" {
			return "", nil, nil, fmt.Errorf("%s: unknown key (a configuration has domain and descriptors)", k)
		}
	}
	domain, ok := top["domain"].(string)
	if !ok || domain == "" {
		return "", nil, nil, errors.New("domain: missing or not a string")
	}
	roots, err = descriptors(top["descriptors"], "descriptors", &notes)
	return domain, roots, notes, err
}

func descriptors(v any, path string, notes *[]string) ([]*node, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a list", path)
	}
	var out []*node
	for i, e := range list {
		p := fmt.Sprintf("%s[%d]", path, i)
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not a map", p)
		}
		n, err := descriptor(m, p, notes)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func descriptor(m map[string]any, p string, notes *[]string) (*node, error) {
	for k := range m {
		if !slices.Contains(descriptorKeys, k) {
			return nil, fmt.Errorf("%s.%s: unknown key", p, k)
		}
	}
	n := &node{path: p}
	var ok bool
	if n.key, ok = m["key"].(string); !ok || n.key == "" {
		return nil, fmt.Errorf("%s.key: missing or not a string", p)
	}
	if v, has := m["value"]; has {
		if n.value, ok = v.(string); !ok {
			n.value = fmt.Sprint(v) // YAML numbers and booleans: envoyproxy/ratelimit reads them as strings
		}
	}
	if _, has := m["quota_mode"]; has {
		return nil, fmt.Errorf("%s.quota_mode: not supported: Sluice has no soft limit that admits over-limit requests and reports them in metadata; use mode: Shadow to observe a limit without enforcing it", p)
	}
	if _, has := m["replaces"]; has {
		return nil, fmt.Errorf("%s.replaces: not supported: every matching Sluice rule applies; exclude the replaced values from the other rule with notIn instead", p)
	}
	var err error
	if n.shadow, err = boolean(m, "shadow_mode", p); err != nil {
		return nil, err
	}
	if n.shared, err = boolean(m, "share_threshold", p); err != nil {
		return nil, err
	}
	if n.shared && !strings.HasSuffix(n.value, "*") {
		return nil, fmt.Errorf("%s.share_threshold: applies only to a wildcard value (ending in *)", p)
	}
	if detailed, err := boolean(m, "detailed_metric", p); err != nil {
		return nil, err
	} else if detailed {
		*notes = append(*notes, p+".detailed_metric: accepted without effect: Sluice's metrics are per rule, never per value")
	}
	if rl, has := m["rate_limit"]; has {
		if n.limit, err = limitOf(rl, p+".rate_limit"); err != nil {
			return nil, err
		}
	}
	if n.children, err = descriptors(m["descriptors"], p+".descriptors", notes); err != nil {
		return nil, err
	}
	return n, nil
}

func boolean(m map[string]any, k, p string) (bool, error) {
	v, has := m[k]
	if !has {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s.%s: not a boolean", p, k)
	}
	return b, nil
}

func limitOf(v any, p string) (*rateLimit, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a map", p)
	}
	for k := range m {
		if !slices.Contains(rateLimitKeys, k) {
			return nil, fmt.Errorf("%s.%s: unknown key", p, k)
		}
	}
	if _, has := m["replaces"]; has {
		return nil, fmt.Errorf("%s.replaces: not supported: every matching Sluice rule applies; exclude the replaced values from the other rule with notIn instead", p)
	}
	rl := &rateLimit{}
	if name, has := m["name"]; has {
		if rl.name, ok = name.(string); !ok {
			return nil, fmt.Errorf("%s.name: not a string", p)
		}
	}
	var err error
	if rl.unlimited, err = boolean(m, "unlimited", p); err != nil {
		return nil, err
	}
	if rl.unlimited {
		return rl, nil
	}
	unit, _ := m["unit"].(string)
	if _, ok := windows[strings.ToLower(unit)]; !ok {
		return nil, fmt.Errorf("%s.unit: %q is not second, minute, hour or day (a longer window is a FixedWindow calendar rule in Sluice: a calendar day, week or month of a time zone, which counts otherwise than envoyproxy/ratelimit)", p, unit)
	}
	rl.unit = strings.ToLower(unit)
	n, ok := m["requests_per_unit"].(float64)
	if !ok || n < 0 || n != float64(int64(n)) {
		return nil, fmt.Errorf("%s.requests_per_unit: missing or not a whole number", p)
	}
	if n > 100_000_000 {
		return nil, fmt.Errorf("%s.requests_per_unit: %d is above Sluice's largest limit, 100000000", p, int64(n))
	}
	rl.perUnit = int64(n)
	return rl, nil
}

// rulesOf walks the tree in order, one rule per rate-limited descriptor; taken holds the
// rule names already used in the policy.
func rulesOf(roots []*node, taken map[string]bool) ([]v1alpha1.Rule, error) {
	var rules []v1alpha1.Rule
	var walk func(level []*node, path []v1alpha1.DescriptorMatch, shared []bool, names []string) error
	walk = func(level []*node, path []v1alpha1.DescriptorMatch, shared []bool, names []string) error {
		for i, n := range level {
			e := v1alpha1.DescriptorMatch{Key: v1alpha1.DescriptorKey(n.key), Value: n.value, NotIn: excluded(level, i)}
			p := append(slices.Clone(path), e)
			sh := append(slices.Clone(shared), n.shared)
			nm := append(slices.Clone(names), segment(n))
			if l := n.limit; l != nil && !l.unlimited {
				rules = append(rules, rule(p, sh, n, ruleName(l.name, nm, taken)))
			}
			if len(p) == 8 && len(n.children) > 0 {
				return fmt.Errorf("%s.descriptors: deeper than 8 entries, Sluice's most", n.path)
			}
			if err := walk(n.children, p, sh, nm); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(roots, nil, nil, nil); err != nil {
		return nil, err
	}
	return rules, nil
}

// excluded is the notIn of level[i]: the values of its siblings of the same key that
// envoyproxy/ratelimit tries before it (exact values before wildcards, wildcards in order,
// both before the key alone), sorted; nil when none.
func excluded(level []*node, i int) []string {
	me := level[i]
	wild := strings.HasSuffix(me.value, "*")
	if me.value != "" && !wild {
		return nil // an exact value is tried first
	}
	var out []string
	for j, s := range level {
		if j == i || s.key != me.key || s.value == "" {
			continue
		}
		sWild := strings.HasSuffix(s.value, "*")
		switch {
		case me.value == "": // the key alone comes last
			out = append(out, s.value)
		case !sWild && strings.HasPrefix(s.value, strings.TrimSuffix(me.value, "*")): // exact before wildcards
			out = append(out, s.value)
		case sWild && j < i && overlap(s.value, me.value): // wildcards in order
			out = append(out, s.value)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// overlap reports whether two wildcard values can match one value.
func overlap(a, b string) bool {
	a, b = strings.TrimSuffix(a, "*"), strings.TrimSuffix(b, "*")
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

func rule(path []v1alpha1.DescriptorMatch, shared []bool, n *node, name string) v1alpha1.Rule {
	key := []v1alpha1.KeyPart{}
	for i, e := range path {
		if !shared[i] {
			key = append(key, v1alpha1.KeyPart{Descriptor: &v1alpha1.DescriptorKeyPart{Key: e.Key}})
		}
	}
	r := v1alpha1.Rule{
		Name:      name,
		Match:     &v1alpha1.RuleMatch{Descriptors: path},
		Key:       key,
		Algorithm: v1alpha1.Algorithm("FixedWindow"),
		Limit:     n.limit.perUnit,
		Window:    v1alpha1.Window(windows[n.limit.unit]),
	}
	if n.shadow {
		r.Mode = v1alpha1.RuleMode("Shadow")
	}
	return r
}

// segment is a node's part of a derived rule name: key, or key-value.
func segment(n *node) string {
	if n.value == "" {
		return n.key
	}
	return n.key + "-" + n.value
}

// ruleName is the rate limit's own name when it is a free DNS label, else a DNS label
// derived from the path's segments (with a short hash when it had to be cut, or was taken).
func ruleName(own string, segments []string, taken map[string]bool) string {
	if own != "" && dnsLabel.MatchString(own) && len(own) <= 63 && !taken[own] {
		taken[own] = true
		return own
	}
	raw := strings.Join(segments, "-")
	name := sanitize(raw)
	if len(name) > 63 || taken[name] {
		sum := sha256.Sum256([]byte(strings.Join(segments, "\x00")))
		name = strings.Trim(name[:min(len(name), 54)], "-") + "-" + hex.EncodeToString(sum[:4])
	}
	for i := 2; taken[name]; i++ {
		name = fmt.Sprintf("%s-%d", strings.Trim(name[:min(len(name), 60)], "-"), i)
	}
	taken[name] = true
	return name
}

// sanitize lowers s and replaces what a DNS label cannot hold with '-'.
func sanitize(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	out := strings.Trim(dashes.ReplaceAllString(string(b), "-"), "-")
	if out == "" {
		return "rule"
	}
	return out
}

// objectName is a DNS subdomain for a domain's policy.
func objectName(domain string) string {
	name := sanitize(domain)
	if len(name) > 56 { // room for a -N suffix
		name = strings.Trim(name[:56], "-")
	}
	return name
}
