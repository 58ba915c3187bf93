package render

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

func TestParseTenantTable(t *testing.T) {
	rows, err := ParseTenantTable("# contract limits\nTenant, Limit ,burst\nacme,500,50\n\n\"globex, inc\",2000,\n  initech ,0,\n# a comment\n\"say \"\"hi\"\"\",7, \n")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		b := "-"
		if r.Burst != nil {
			b = fmt.Sprint(*r.Burst)
		}
		got = append(got, fmt.Sprintf("%s/%d/%s@%d", r.Value, r.Limit, b, r.Line))
	}
	if want := `acme/500/50@3 globex, inc/2000/-@5 initech/0/-@6 say "hi"/7/-@8`; strings.Join(got, " ") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
	for data, want := range map[string]string{
		"":                                 "the table is empty",
		"# only a comment\n":               "the table is empty",
		"name,limit\nacme,5\n":             `line 1: the header must be tenant,limit or tenant,limit,burst, not "name,limit"`,
		"tenant,limit\nacme,5,6\n":         "wrong number of fields",
		"tenant,limit\nacme,five\n":        `line 2: tenant "acme": limit "five" is not an integer from 0 to 100000000`,
		"tenant,limit\nacme,-1\n":          "line 2",
		"tenant,limit\nacme,100000001\n":   "line 2",
		"tenant,limit,burst\nacme,5,0\n":   `line 2: tenant "acme": burst "0" is not an integer from 1`,
		"tenant,limit\n,5\n":               "line 2: the tenant is empty",
		"tenant,limit\nacme,5\nacme,6\n":   `line 3: tenant "acme" is also on line 2`,
		"tenant,limit\n\"acme,5\n":         "extraneous or missing",
		"tenant,limit\n" + long() + ",5\n": "more than 1024",
	} {
		if _, err := ParseTenantTable(data); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTenantTable(%.40q): %v, want an error containing %q", data, err, want)
		}
	}
}

func long() string { return strings.Repeat("x", MaxTenantValue+1) }

// tenantPolicy is a policy in namespace ns whose one rule, alg with limit 100 a minute, has a
// table of tenant limits in ConfigMap limits, keyed by X-Tenant.
func tenantPolicy(alg v1alpha1.Algorithm, mut func(*v1alpha1.Rule)) *v1alpha1.RateLimitPolicy {
	p := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "shop"}}
	p.Spec.PodSelector = &metav1.LabelSelector{}
	p.Spec.Rules = []v1alpha1.Rule{{Name: "per-tenant", Key: []v1alpha1.KeyPart{{Header: &v1alpha1.HeaderKey{Name: "x-tenant"}}},
		Algorithm: alg, Limit: 100, Window: "1m", TenantLimits: &v1alpha1.TenantLimitsSpec{ConfigMapName: "limits"}}}
	if mut != nil {
		mut(&p.Spec.Rules[0])
	}
	return p
}

func tables(data string, labelled bool) ConfigMapTables {
	cm := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits", Namespace: "shop"}, Data: map[string]string{"per-tenant": data}}
	if labelled {
		cm.Labels = map[string]string{v1alpha1.TenantLimitsLabel: "true"}
	}
	return NewConfigMapTables([]corev1.ConfigMap{cm})
}

// TestTenantsDefaultsAndChecks: a row's burst defaults as the rule's own does, and every row is
// checked against its rule; a table that cannot be used renders the rule without one, saying
// why.
func TestTenantsDefaultsAndChecks(t *testing.T) {
	tests := map[string]struct {
		alg    v1alpha1.Algorithm
		mut    func(*v1alpha1.Rule)
		data   string
		want   []policy.TenantLimit
		errSub string
	}{
		"a bucket: the row's burst, else its limit": {alg: v1alpha1.TokenBucket, data: "tenant,limit,burst\nb,50,\na,500,5\nz,0,\n",
			want: []policy.TenantLimit{{Value: "a", Limit: 500, Burst: 5}, {Value: "b", Limit: 50, Burst: 50}, {Value: "z", Limit: 0}}},
		"a bucket: else the rule's burst": {alg: v1alpha1.LeakyBucket, mut: func(r *v1alpha1.Rule) { r.Burst = ptr.To[int64](20) }, data: "tenant,limit\na,500\n",
			want: []policy.TenantLimit{{Value: "a", Limit: 500, Burst: 20}}},
		"a window: no burst":       {alg: v1alpha1.FixedWindow, data: "tenant,limit\na,5\n", want: []policy.TenantLimit{{Value: "a", Limit: 5}}},
		"a window given a burst":   {alg: v1alpha1.FixedWindow, data: "tenant,limit,burst\na,5,5\n", errSub: "line 2: tenant \"a\": burst applies only to TokenBucket and LeakyBucket"},
		"a log above its bound":    {alg: v1alpha1.SlidingWindowLog, data: "tenant,limit\na,10001\n", errSub: "line 2: tenant \"a\": limit 10001 is above 10000"},
		"below the rule's cost":    {alg: v1alpha1.FixedWindow, mut: func(r *v1alpha1.Rule) { r.Cost = ptr.To[int64](3) }, data: "tenant,limit\na,2\n", errSub: "cost 3 is above the tenant's capacity 2"},
		"blocked with a burst":     {alg: v1alpha1.TokenBucket, data: "tenant,limit,burst\na,0,3\n", errSub: "limit 0 denies every request"},
		"a concurrency limit of 0": {alg: v1alpha1.Concurrency, mut: func(r *v1alpha1.Rule) { r.Window = "" }, data: "tenant,limit\na,0\n", errSub: "does not apply to Concurrency"},
		"no such key":              {alg: v1alpha1.FixedWindow, mut: func(r *v1alpha1.Rule) { r.TenantLimits.Key = "other" }, errSub: "ConfigMap limits has no key other"},
		"the second key part": {alg: v1alpha1.FixedWindow, mut: func(r *v1alpha1.Rule) {
			r.Key = append(r.Key, v1alpha1.KeyPart{Path: &v1alpha1.PathKey{}})
			r.TenantLimits.KeyPart = ptr.To[int32](1)
		}, data: "tenant,limit\n/a,5\n", want: []policy.TenantLimit{{Value: "/a", Limit: 5}}},
		"a lease's maxUnits above a row": {alg: v1alpha1.TokenBucket, mut: func(r *v1alpha1.Rule) { r.Lease = &v1alpha1.LeaseSpec{MaxAge: "1s", MaxUnits: ptr.To[int64](50)} }, data: "tenant,limit\na,5\n", want: []policy.TenantLimit{{Value: "a", Limit: 5, Burst: 5}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := tenantPolicy(tc.alg, tc.mut)
			out, st, err := CompileTables(p, tables(tc.data, true))
			if err != nil {
				t.Fatal(err)
			}
			if len(st) != 1 || st[0].Rule != "per-tenant" || st[0].ConfigMap != "limits" {
				t.Fatalf("statuses %+v", st)
			}
			if tc.errSub != "" {
				if st[0].Err == nil || !strings.Contains(st[0].Err.Error(), tc.errSub) || out.Rules[0].Tenants != nil || st[0].Kept {
					t.Fatalf("status %+v, tenants %+v; want an error containing %q and no table", st[0], out.Rules[0].Tenants, tc.errSub)
				}
				return
			}
			if st[0].Err != nil || out.Rules[0].Tenants == nil || fmt.Sprint(out.Rules[0].Tenants.Limits) != fmt.Sprint(tc.want) || st[0].Tenants != len(tc.want) {
				t.Fatalf("status %+v, tenants %+v; want %+v", st[0], out.Rules[0].Tenants, tc.want)
			}
			if err := out.Validate(); err != nil {
				t.Fatalf("the rendered rule does not validate: %v", err)
			}
		})
	}
}

// lastTables is ConfigMapTables with a rule's last rendered tenants.
type lastTables struct {
	ConfigMapTables
	last *policy.Tenants
}

func (l lastTables) LastTenants(*v1alpha1.RateLimitPolicy, string) *policy.Tenants { return l.last }

// TestTenantsKeepTheLastGoodTable: a missing, unlabelled or invalid table renders the rule
// with its last good one, when that is still valid for the rule; never without a limit.
func TestTenantsKeepTheLastGoodTable(t *testing.T) {
	last := &policy.Tenants{Limits: []policy.TenantLimit{{Value: "acme", Limit: 500}}}
	for name, tc := range map[string]struct {
		tables   TenantTables
		rule     func(*v1alpha1.Rule)
		kept     bool
		errWords string
	}{
		"invalid entry":    {tables: lastTables{tables("tenant,limit\nacme,lots\n", true), last}, kept: true, errWords: `line 2: tenant "acme": limit "lots"`},
		"unlabelled":       {tables: lastTables{tables("tenant,limit\nacme,5\n", false), last}, kept: true, errWords: `lacks the label sluice.dev/tenant-limits: "true"`},
		"missing":          {tables: lastTables{ConfigMapTables{}, last}, kept: true, errWords: "ConfigMap limits not found in namespace shop"},
		"no longer valid":  {tables: lastTables{ConfigMapTables{}, last}, rule: func(r *v1alpha1.Rule) { r.Algorithm = v1alpha1.SlidingWindowLog; last.Limits[0].Limit = 20000 }, errWords: "not found"},
		"another key part": {tables: lastTables{ConfigMapTables{}, &policy.Tenants{Part: 1}}, errWords: "not found"},
		"rendered offline": {tables: nil, errWords: "ConfigMap limits was not given"},
	} {
		t.Run(name, func(t *testing.T) {
			p := tenantPolicy(v1alpha1.FixedWindow, tc.rule)
			out, st, err := CompileTables(p, tc.tables)
			if err != nil {
				t.Fatal(err)
			}
			if st[0].Err == nil || !strings.Contains(st[0].Err.Error(), tc.errWords) || st[0].Kept != tc.kept {
				t.Fatalf("status %+v, want an error containing %q, kept %v", st[0], tc.errWords, tc.kept)
			}
			if tc.kept != (out.Rules[0].Tenants != nil) || out.Rules[0].Limit != 100 {
				t.Fatalf("tenants %+v, rule limit %d", out.Rules[0].Tenants, out.Rules[0].Limit)
			}
		})
	}
}

// TestTenantTableSize: 10,000 tenants of random IDs render, compressed, to about 144 KB, under a
// sixth of what a ConfigMap holds (docs/policy.md quotes the figure the log line prints); the
// user's own ConfigMap, at about 27 bytes a row, is the tighter bound.
func TestTenantTableSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 1))
	var b strings.Builder
	b.WriteString("tenant,limit,burst\n")
	for range 10_000 {
		fmt.Fprintf(&b, "cus_%014x,%d,\n", rng.Uint64()>>8, []int64{1000, 5000, 20000, 50000, 100000}[rng.IntN(5)]*(1+rng.Int64N(20)))
	}
	p := tenantPolicy(v1alpha1.TokenBucket, func(r *v1alpha1.Rule) { r.Window = "1h" })
	doc, verdicts := Build("shop", []v1alpha1.RateLimitPolicy{*p}, struct {
		FixedReplicas
		ConfigMapTables
	}{1, tables(b.String(), true)})
	if v := verdicts["api"]; v.Err != nil || len(v.Tenants) != 1 || v.Tenants[0].Err != nil || v.Tenants[0].Tenants != 10_000 {
		t.Fatalf("verdict %+v", v)
	}
	_, payload, left, _, err := Fit(doc, []string{"api"}, 0)
	if err != nil || len(left) > 0 {
		t.Fatalf("fit: %v, left out %v", err, left)
	}
	t.Logf("10,000 tenants: %d bytes of table, %d bytes rendered, %d bytes encoded (compressed: %v)", b.Len(), payload.Plain, payload.Size(), payload.BinaryData != nil)
	if payload.Size() > policy.MaxConfigMapBytes/6 {
		t.Errorf("10,000 tenants take %d bytes of the ConfigMap's %d", payload.Size(), policy.MaxConfigMapBytes)
	}
}
