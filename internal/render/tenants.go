package render

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// TenantTables answers Build's questions about the tables of tenant limits policies reference
// (spec.rules[].tenantLimits). A Pods given to Build that implements it renders those tables;
// without it every such rule renders without a table (every tenant gets the rule's limit)
// and its TenantStatus says so.
type TenantTables interface {
	// TenantTable returns the table of rule r of p: the data under the key it names of the
	// ConfigMap it names, in p's namespace, or an error saying why there is none.
	TenantTable(p *v1alpha1.RateLimitPolicy, r *v1alpha1.Rule) (string, error)
	// LastTenants returns the tenants rule of p was last rendered with, nil when none: what
	// the rule keeps while its table is missing or invalid.
	LastTenants(p *v1alpha1.RateLimitPolicy, rule string) *policy.Tenants
}

// TenantStatus is what became of one rule's table of tenant limits.
type TenantStatus struct {
	// Rule is the rule's name.
	Rule string
	// Tenants is the number of tenants the rule was rendered with.
	Tenants int
	// Err says why the table could not be used as it is; the rule was rendered with its last
	// good table (Kept) or, when there was none, without one.
	Err  error
	Kept bool
	// ConfigMap and Key are where the table is read from.
	ConfigMap, Key string
}

// TenantTableKey is the ConfigMap key of rule r's table: its tenantLimits.key, else its name.
func TenantTableKey(r *v1alpha1.Rule) string { return cmp.Or(r.TenantLimits.Key, r.Name) }

// MaxTenantValue is the longest tenant value a table may hold, in bytes.
const MaxTenantValue = 1024

// TenantRow is one row of a table of tenant limits.
type TenantRow struct {
	// Line is the row's line in the table, from 1 (the header).
	Line  int
	Value string
	Limit int64
	// Burst is the row's burst; nil when the row gives none (the rule's, or the row's limit).
	Burst *int64
}

// ParseTenantTable parses a table of tenant limits: CSV (RFC 4180: a value with a comma, a
// quote or a line break is quoted, "" stands for a quote) whose first row is the header
// tenant,limit or tenant,limit,burst, and then one row per tenant: the tenant's value (at
// most MaxTenantValue bytes; spaces around it are dropped, as an HTTP field's value has none),
// its limit (0 to 100000000; 0 denies every request of the tenant) and, when the header has
// the column, its burst (1 to 100000000, or empty for the default). Lines starting with # and
// blank lines are skipped. A tenant appears once. Errors name the line.
func ParseTenantTable(data string) ([]TenantRow, error) {
	rd := csv.NewReader(strings.NewReader(data))
	rd.Comment = '#'
	rd.ReuseRecord = true
	header, err := rd.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("the table is empty: its first row must be the header tenant,limit or tenant,limit,burst")
	}
	if err != nil {
		return nil, err
	}
	for i := range header {
		header[i] = strings.ToLower(strings.TrimSpace(header[i]))
	}
	cols := strings.Join(header, ",")
	if cols != "tenant,limit" && cols != "tenant,limit,burst" {
		line, _ := rd.FieldPos(0)
		return nil, fmt.Errorf("line %d: the header must be tenant,limit or tenant,limit,burst, not %q", line, cols)
	}
	var rows []TenantRow
	first := map[string]int{}
	for {
		rec, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err // csv's errors name the line
		}
		line, _ := rd.FieldPos(0)
		row, err := parseTenantRow(rec)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if l, dup := first[row.Value]; dup {
			return nil, fmt.Errorf("line %d: tenant %q is also on line %d", line, row.Value, l)
		}
		row.Line, first[row.Value] = line, line
		rows = append(rows, row)
	}
	return rows, nil
}

func parseTenantRow(rec []string) (TenantRow, error) {
	row := TenantRow{Value: strings.TrimSpace(rec[0])}
	switch {
	case row.Value == "":
		return row, errors.New("the tenant is empty")
	case len(row.Value) > MaxTenantValue:
		return row, fmt.Errorf("the tenant is %d bytes long, more than %d", len(row.Value), MaxTenantValue)
	}
	number := func(what, v string, lo int64) (int64, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < lo || n > limiter.MaxLimit {
			return 0, fmt.Errorf("tenant %q: %s %q is not an integer from %d to %d", row.Value, what, v, lo, limiter.MaxLimit)
		}
		return n, nil
	}
	var err error
	if row.Limit, err = number("limit", rec[1], 0); err != nil {
		return row, err
	}
	if len(rec) > 2 && strings.TrimSpace(rec[2]) != "" {
		b, err := number("burst", rec[2], 1)
		if err != nil {
			return row, err
		}
		row.Burst = &b
	}
	return row, nil
}

// tenantsOf returns rule r's table as rendered for compiled (r compiled): the rows of data,
// sorted by tenant, each with its burst resolved as the rule's own is (a bucket's row without
// one takes the rule's burst when the rule sets one, else its own limit; a tenant of limit 0
// has none) and checked against the rule (policy.Rule.ValidateTenant).
func tenantsOf(r *v1alpha1.Rule, compiled policy.Rule, data string) (*policy.Tenants, error) {
	rows, err := ParseTenantTable(data)
	if err != nil {
		return nil, err
	}
	bucket := r.Algorithm == v1alpha1.TokenBucket || r.Algorithm == v1alpha1.LeakyBucket
	t := &policy.Tenants{Limits: make([]policy.TenantLimit, 0, len(rows))}
	if r.TenantLimits.KeyPart != nil {
		t.Part = int(*r.TenantLimits.KeyPart)
	}
	for _, row := range rows {
		e := policy.TenantLimit{Value: row.Value, Limit: row.Limit}
		switch {
		case row.Burst != nil && !bucket:
			return nil, fmt.Errorf("line %d: tenant %q: burst applies only to TokenBucket and LeakyBucket, not %s", row.Line, row.Value, r.Algorithm)
		case row.Limit == 0 && row.Burst != nil:
			return nil, fmt.Errorf("line %d: tenant %q: limit 0 denies every request: burst does not apply", row.Line, row.Value)
		case row.Limit == 0 || !bucket:
		case row.Burst != nil:
			e.Burst = *row.Burst
		case r.Burst != nil:
			e.Burst = *r.Burst
		default:
			e.Burst = row.Limit
		}
		if err := compiled.ValidateTenant(e); err != nil {
			return nil, fmt.Errorf("line %d: tenant %q: %w", row.Line, row.Value, err)
		}
		t.Limits = append(t.Limits, e)
	}
	slices.SortFunc(t.Limits, func(a, b policy.TenantLimit) int { return strings.Compare(a.Value, b.Value) })
	return t, nil
}

// withTenants gives each rule of out (compiled from p) that has tenantLimits its table, read
// through tables: the table as it is when it is valid, else the rule's last good one (when it
// is still valid for the rule), else none. It returns what became of each table.
func withTenants(p *v1alpha1.RateLimitPolicy, out *policy.Policy, tables TenantTables) []TenantStatus {
	var statuses []TenantStatus
	for i := range p.Spec.Rules {
		r := &p.Spec.Rules[i]
		if r.TenantLimits == nil {
			continue
		}
		j := slices.IndexFunc(out.Rules, func(c policy.Rule) bool { return c.Name == r.Name })
		compiled := &out.Rules[j]
		st := TenantStatus{Rule: r.Name, ConfigMap: r.TenantLimits.ConfigMapName, Key: TenantTableKey(r)}
		var data string
		if tables == nil {
			st.Err = fmt.Errorf("ConfigMap %s was not given", st.ConfigMap)
		} else {
			data, st.Err = tables.TenantTable(p, r)
		}
		if st.Err == nil {
			var t *policy.Tenants
			if t, st.Err = tenantsOf(r, *compiled, data); st.Err == nil {
				compiled.Tenants = t
			} else {
				st.Err = fmt.Errorf("ConfigMap %s, key %s: %w", st.ConfigMap, st.Key, st.Err)
			}
		}
		if st.Err != nil && tables != nil {
			if last := tables.LastTenants(p, r.Name); last != nil && keeps(*compiled, r, last) {
				compiled.Tenants, st.Kept = last, true
			}
		}
		if compiled.Tenants != nil {
			st.Tenants = len(compiled.Tenants.Limits)
		}
		statuses = append(statuses, st)
	}
	return statuses
}

// keeps reports whether last, a rule's previous table, is still valid for the rule as now
// compiled: the same key part, every entry a valid limit for it.
func keeps(compiled policy.Rule, r *v1alpha1.Rule, last *policy.Tenants) bool {
	part := 0
	if r.TenantLimits.KeyPart != nil {
		part = int(*r.TenantLimits.KeyPart)
	}
	c := compiled
	c.Tenants = last
	return last.Part == part && c.ValidateTenants() == nil
}

// ConfigMapTables answers TenantTables from ConfigMaps given by the caller (sluicectl render's
// manifests): those labelled TenantLimitsLabel "true", by namespace and name. It has no last
// tables.
type ConfigMapTables map[string]*corev1.ConfigMap

// NewConfigMapTables indexes cms.
func NewConfigMapTables(cms []corev1.ConfigMap) ConfigMapTables {
	t := ConfigMapTables{}
	for i := range cms {
		t[cms[i].Namespace+"/"+cms[i].Name] = &cms[i]
	}
	return t
}

// TenantTable implements TenantTables.
func (t ConfigMapTables) TenantTable(p *v1alpha1.RateLimitPolicy, r *v1alpha1.Rule) (string, error) {
	return TableFrom(t[p.Namespace+"/"+r.TenantLimits.ConfigMapName], p.Namespace, r)
}

// LastTenants implements TenantTables: none.
func (ConfigMapTables) LastTenants(*v1alpha1.RateLimitPolicy, string) *policy.Tenants { return nil }

// TableFrom returns rule r's table from cm, the ConfigMap r names in namespace (nil when it
// does not exist), or why there is none: no such ConfigMap, no TenantLimitsLabel, no such key.
func TableFrom(cm *corev1.ConfigMap, namespace string, r *v1alpha1.Rule) (string, error) {
	name, key := r.TenantLimits.ConfigMapName, TenantTableKey(r)
	if cm == nil {
		return "", fmt.Errorf("ConfigMap %s not found in namespace %s (with the label %s: \"true\")", name, namespace, v1alpha1.TenantLimitsLabel)
	}
	if cm.Labels[v1alpha1.TenantLimitsLabel] != "true" {
		return "", fmt.Errorf("ConfigMap %s lacks the label %s: \"true\", without which Sluice does not read it", name, v1alpha1.TenantLimitsLabel)
	}
	data, ok := cm.Data[key]
	if !ok {
		return "", fmt.Errorf("ConfigMap %s has no key %s", name, key)
	}
	return data, nil
}

// Fingerprint summarises what TenantTable answers from: each ConfigMap's name, resource
// version and, when it has none (a manifest), its data.
func (t ConfigMapTables) Fingerprint() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(t)) {
		cm := t[k]
		fmt.Fprintf(&b, "%s\x00%s\x00%v\x00", k, cm.ResourceVersion, cm.Labels[v1alpha1.TenantLimitsLabel])
		if cm.ResourceVersion == "" {
			for _, dk := range slices.Sorted(maps.Keys(cm.Data)) {
				fmt.Fprintf(&b, "%s=%s\x00", dk, cm.Data[dk])
			}
		}
	}
	return b.String()
}
