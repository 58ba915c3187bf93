package convert_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
)

func convertText(t *testing.T, texts ...string) (*convert.Result, error) {
	t.Helper()
	var files []convert.File
	for i, s := range texts {
		files = append(files, convert.File{Name: fmt.Sprintf("f%d.yaml", i), Content: []byte(s)})
	}
	return convert.EnvoyRatelimit(files, convert.Options{Namespace: "edge"})
}

func testdata(t *testing.T, name string) convert.File {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return convert.File{Name: name, Content: b}
}

// describe renders a rule as "name: entries key=... limit/window [Shadow]" for comparisons.
func describe(r v1alpha1.Rule) string {
	var entries, key []string
	for _, d := range r.Match.Descriptors {
		e := string(d.Key)
		if d.Value != "" {
			e += "=" + d.Value
		}
		if len(d.NotIn) > 0 {
			e += "!" + strings.Join(d.NotIn, "|")
		}
		entries = append(entries, e)
	}
	for _, k := range r.Key {
		key = append(key, string(k.Descriptor.Key))
	}
	s := fmt.Sprintf("%s: %s key=%s %d/%s", r.Name, strings.Join(entries, ","), strings.Join(key, ","), r.Limit, r.Window)
	if r.Mode != "" {
		s += " " + string(r.Mode)
	}
	return s
}

func TestExamples(t *testing.T) {
	for _, tc := range []struct {
		file  string
		rules []string
		notes int
	}{
		{"mongo_cps.yaml", []string{
			"database-users: database=users key=database 500/1s",
			"database-default: database=default key=database 500/1s",
		}, 0},
		{"messaging.yaml", []string{
			"message-type-marketing-to-number: message_type=marketing,to_number key=message_type,to_number 5/24h",
			"to-number: to_number key=to_number 100/24h",
		}, 0},
		{"edge_proxy_per_ip.yaml", []string{
			"remote-address: remote_address!50.0.0.5 key=remote_address 10/1s",
			"remote-address-50-0-0-5: remote_address=50.0.0.5 key=remote_address 0/1s",
		}, 0},
		{"internal.yaml", []string{ // ldap and user=admin are unlimited: no rule, excluded from user
			"azure: azure key=azure 100/1m",
			"user: user!admin key=user 3/1m",
		}, 0},
		{"example6.yaml", []string{
			"service-user-user-a: service,user=user-a key=service,user 10/1s Shadow",
			"service-user-user-b: service,user=user-b key=service,user 20/1s",
		}, 0},
		{"example8.yaml", []string{
			"key1: key1!value1 key=key1 10/1m",
			"key1-value1: key1=value1 key=key1 20/1m",
		}, 1},
		{"wildcards.yaml", []string{
			"path-files: path=/files/*!/files/big key=path 2/1m",
			"path-models: path=/models/* key= 3/1m", // share_threshold: one counter
			"path-files-big: path=/files/big key=path 1/1m",
			"path-f: path=/f*!/files/*|/files/big key=path 4/1m",
			"path: path!/f*|/files/*|/files/big|/models/* key=path 5/1h",
		}, 0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			res, err := convert.EnvoyRatelimit([]convert.File{testdata(t, tc.file)}, convert.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Policies) != 1 {
				t.Fatalf("%d policies, want 1", len(res.Policies))
			}
			p := res.Policies[0]
			if p.Spec.Domain == "" || p.Spec.PodSelector != nil || p.Spec.FailureMode != "Local" {
				t.Fatalf("spec %+v", p.Spec)
			}
			var got []string
			for _, r := range p.Spec.Rules {
				got = append(got, describe(r))
			}
			if !slices.Equal(got, tc.rules) {
				t.Fatalf("rules\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.rules, "\n"))
			}
			if len(res.Notes) != tc.notes {
				t.Fatalf("notes %q, want %d", res.Notes, tc.notes)
			}
		})
	}
}

// TestUnconvertible checks that what has no equivalent fails, naming the file and the key.
func TestUnconvertible(t *testing.T) {
	_, err := convert.EnvoyRatelimit([]convert.File{testdata(t, "replaces.yaml")}, convert.Options{})
	if err == nil || !strings.Contains(err.Error(), "replaces.yaml: descriptors[1].descriptors[0].rate_limit.replaces: not supported") {
		t.Fatalf("replaces: %v", err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n- key: k\n  quota_mode: true\n  rate_limit: {unit: second, requests_per_unit: 1}\n", "descriptors[0].quota_mode: not supported"},
		{"domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: week, requests_per_unit: 1}\n", `descriptors[0].rate_limit.unit: "week" is not second, minute, hour or day`},
		{"domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: second, requests_per_unit: -1}\n", "descriptors[0].rate_limit.requests_per_unit: missing or not a whole number"},
		{"domain: d\ndescriptors:\n- key: k\n  rate_limits: {unit: second, requests_per_unit: 1}\n", "descriptors[0].rate_limits: unknown key"},
		{"domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: second, requests_per_unit: 1, burst: 2}\n", "descriptors[0].rate_limit.burst: unknown key"},
		{"domain: d\ndescriptors:\n- key: k\n  value: v\n  share_threshold: true\n  rate_limit: {unit: second, requests_per_unit: 1}\n", "descriptors[0].share_threshold: applies only to a wildcard value"},
		{"descriptors:\n- key: k\n", "domain: missing"},
		{"domain: d\nversion: 2\n", "version: unknown key"},
		{"domain: d\ndescriptors:\n- value: v\n", "descriptors[0].key: missing"},
		{"domain: d\ndescriptors:\n- key: k\n  rate_limit: {unlimited: true}\n", "domain d: no descriptor has a rate limit"},
	} {
		_, err := convertText(t, tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.yaml, err, tc.want)
		}
	}
}

// TestMergeAndSplit checks that files of one domain merge into one tree (a key-only entry
// excludes the values another file gives), that a domain of more than 64 rules takes several
// policies, and that names stay unique DNS labels.
func TestMergeAndSplit(t *testing.T) {
	res, err := convertText(t,
		"domain: d\ndescriptors:\n- key: user\n  rate_limit: {unit: minute, requests_per_unit: 5}\n",
		"domain: d\ndescriptors:\n- key: user\n  value: vip\n  rate_limit: {unit: minute, requests_per_unit: 50}\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Policies) != 1 || len(res.Policies[0].Spec.Rules) != 2 || describe(res.Policies[0].Spec.Rules[0]) != "user: user!vip key=user 5/1m" {
		t.Fatalf("merged: %+v", res.Policies)
	}
	if res.Policies[0].Namespace != "edge" || res.Policies[0].Name != "d" {
		t.Fatalf("metadata %+v", res.Policies[0].ObjectMeta)
	}

	res, err = convertText(t, "---\ndomain: a\ndescriptors:\n- key: k\n  rate_limit: {unit: second, requests_per_unit: 1}\n---\n\n---\ndomain: b\ndescriptors:\n- key: k\n  rate_limit: {unit: second, requests_per_unit: 2}\n")
	if err != nil || len(res.Policies) != 2 || res.Policies[0].Spec.Domain != "a" || res.Policies[1].Spec.Domain != "b" {
		t.Fatalf("two documents in one file: %v, %+v", err, res)
	}

	var b strings.Builder
	b.WriteString("domain: big_domain\ndescriptors:\n")
	for i := range 130 {
		fmt.Fprintf(&b, "- key: tenant\n  value: T_%d\n  rate_limit: {name: same, unit: second, requests_per_unit: %d}\n", i, i+1)
	}
	res, err = convertText(t, b.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Policies) != 3 || res.Policies[0].Name != "big-domain" || res.Policies[1].Name != "big-domain-2" || res.Policies[2].Name != "big-domain-3" {
		t.Fatalf("%d policies", len(res.Policies))
	}
	seen := map[string]bool{}
	total := 0
	for _, p := range res.Policies {
		if len(p.Spec.Rules) > 64 || p.Spec.Domain != "big_domain" {
			t.Fatalf("policy %s: %d rules, domain %s", p.Name, len(p.Spec.Rules), p.Spec.Domain)
		}
		for _, r := range p.Spec.Rules {
			if seen[r.Name] || len(r.Name) > 63 {
				t.Fatalf("rule name %q repeated or too long", r.Name)
			}
			seen[r.Name] = true
			total++
		}
	}
	if total != 130 || !seen["same"] {
		t.Fatalf("%d rules; the first keeps its own name: %v", total, seen["same"])
	}
}
