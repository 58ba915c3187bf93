// Package policy defines policies.json, the rendered form of a namespace's RateLimitPolicies
// that injected sidecars read, and its typed vocabularies (failure modes, header styles, rule
// modes). It is the one contract between the controller and `sluicectl render` (writers, both
// through package render, which compiles API objects into this format) and the sidecar and the
// RLS server (readers). It does not know the API types, so that readers do not link them.
package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// Names shared by the controller, the webhook and the sidecar.
const (
	// Version is the version of the rendered format this package writes and reads.
	Version = 1
	// ConfigMapName is the name of the ConfigMap each namespace's policies are rendered into.
	ConfigMapName = "sluice-policies"
	// DataKey is the ConfigMap key holding the rendered document.
	DataKey = "policies.json"
	// HashAnnotation carries the SHA-256 of the rendered document on the ConfigMap.
	HashAnnotation = "sluice.dev/content-hash"
	// CompressedVersion is the version of the envelope DataKey holds when the document is
	// compressed: the gzip of the (version Version) document is under CompressedKey, in the
	// ConfigMap's binaryData. Readers that know only Version refuse the envelope and keep the
	// document they have, rather than mistaking it for "no policies".
	CompressedVersion = 2
	// CompressedKey is the binaryData key of the compressed document.
	CompressedKey = DataKey + ".gz"
	// CompressThreshold is the size of the compact document above which Encode compresses it.
	CompressThreshold = 256 << 10
	// MaxConfigMapBytes is the most a ConfigMap's data and binaryData may hold together.
	MaxConfigMapBytes = 1 << 20
	// maxDecompressed bounds what a reader inflates, against a hostile or corrupt file.
	maxDecompressed = 64 << 20
)

// Document is the content of policies.json: every accepted policy of one namespace.
type Document struct {
	// Version is the format version, Version.
	Version int `json:"version"`
	// Namespace is the namespace the policies live in.
	Namespace string `json:"namespace"`
	// Policies are sorted by name.
	Policies []Policy `json:"policies"`
}

// Policy is one RateLimitPolicy with every default applied and every duration in milliseconds.
type Policy struct {
	Name string `json:"name"`
	// Domain is the Envoy rate limit domain the RLS server serves the policy's descriptor
	// rules for; empty when the policy serves none.
	Domain string `json:"domain,omitempty"`
	// Selector selects the pods that enforce the policy's HTTP rules, as in the API; nil (a
	// policy that only serves a Domain) selects no pod.
	Selector *LabelSelector `json:"selector,omitempty"`
	// Replicas is the number of ready pods Selector matched when rendered. When Pods is nil
	// (a document rendered for a replica count, or by an older writer) every pod holds the
	// unnamed share, UnnamedShare(limit, Replicas).
	Replicas int32 `json:"replicas"`
	// Pods, when not nil, are the names of those ready pods, sorted, and Replicas is their
	// number: a pod's index is its rank, and the pod of rank i holds Share(limit, Replicas, i)
	// units of each rule (and of its burst), so that the shares sum to the limit exactly. A
	// pod not listed (not ready yet, or not rendered yet) holds 0 until the next render. An
	// empty list (no ready pod) is written as [], nil as null: the two stay distinct.
	Pods           []string    `json:"pods"`
	FailureMode    FailureMode `json:"failureMode"`
	TrustedProxies []string    `json:"trustedProxies,omitempty"`
	Response       Response    `json:"response"`
	Rules          []Rule      `json:"rules"`
	// JWT, when set, is how the policy verifies the tokens its rules key on (SourceJWTClaim)
	// or match (Match.JWT).
	JWT *JWT `json:"jwt,omitempty"`
}

// Adaptive makes a Concurrency rule each pod's own adaptive limit on the requests in flight
// to its application that the rule matches (limiter.Adaptive), between MinLimit and the rule's
// Limit; its defaults resolved.
type Adaptive struct {
	MinLimit     int64 `json:"minLimit"`
	TolerancePct int64 `json:"tolerancePct"`
}

// AdaptiveParams is the rule's Adaptive as the limiter takes it: from MinLimit up to Limit.
// Call it only for a rule with Adaptive.
func (r Rule) AdaptiveParams() limiter.AdaptiveParams {
	return limiter.AdaptiveParams{MinLimit: r.Adaptive.MinLimit, MaxLimit: r.Limit, TolerancePct: r.Adaptive.TolerancePct}
}

// Share is the share of total held by the pod of rank 0 <= rank < n among n pods:
// floor(total/n), plus one for the first total mod n ranks. Summed over the ranks 0..n-1 it
// is total exactly, whatever n, including n > total (then the last n - total ranks hold 0).
// It is 0 for a rank outside 0..n-1.
func Share(total int64, n int32, rank int) int64 {
	if n <= 0 || rank < 0 || rank >= int(n) {
		return 0
	}
	s := total / int64(n)
	if int64(rank) < total%int64(n) {
		s++
	}
	return s
}

// UnnamedShare is the share of total held by each of n pods that know no rank (a document
// without Pods): floor(total/max(1, n)). The fleet's sum stays at or under total; it is exact
// only when n divides total, and every pod holds 0 when n > total.
func UnnamedShare(total int64, n int32) int64 { return total / int64(max(n, 1)) }

// PodShare returns the share of total the pod podName holds under p: Share by its rank in
// Pods when p lists pods (0 for a pod not listed), UnnamedShare otherwise.
func (p Policy) PodShare(total int64, podName string) int64 {
	if p.Pods == nil {
		return UnnamedShare(total, p.Replicas)
	}
	rank, ok := slices.BinarySearch(p.Pods, podName)
	if !ok || podName == "" {
		return 0
	}
	return Share(total, int32(len(p.Pods)), rank)
}

// PodShareAmong is PodShare with total split among the first m of p's pods only (by rank;
// a pod ranked m or later holds 0), or, when p lists no pods, among m unnamed pods.
func (p Policy) PodShareAmong(total int64, m int32, podName string) int64 {
	if p.Pods == nil {
		return UnnamedShare(total, m)
	}
	rank, ok := slices.BinarySearch(p.Pods, podName)
	if !ok || podName == "" {
		return 0
	}
	return Share(total, m, rank)
}

// Sharers is the number of pods the policy's limits are split among while Redis cannot decide:
// len(Pods) when p lists pods, else Replicas (at least 1).
func (p Policy) Sharers() int32 {
	if p.Pods != nil {
		return int32(len(p.Pods))
	}
	return max(p.Replicas, 1)
}

// FailureMode is what a sidecar does with a policy's requests while Redis cannot decide.
type FailureMode string

// The failure modes; the API's enum (v1alpha1.FailureMode) has the same values.
const (
	// FailureLocal decides with an in-process limiter holding this pod's share of each limit.
	FailureLocal FailureMode = "Local"
	// FailureOpen admits every request.
	FailureOpen FailureMode = "Open"
	// FailureClosed rejects every request with 503.
	FailureClosed FailureMode = "Closed"
)

// Response shapes a sidecar's answers.
type Response struct {
	StatusCode int         `json:"statusCode"`
	Headers    HeaderStyle `json:"headers"`
	// RetryAfterMs adds retry-after-ms, the exact wait in ms, beside Retry-After.
	RetryAfterMs bool `json:"retryAfterMs,omitempty"`
	// LegacyReset is how X-RateLimit-Reset gives the reset; empty means ResetSeconds.
	LegacyReset ResetFormat `json:"legacyReset,omitempty"`
	// Body shapes a limited request's body; nil means BodyJSON.
	Body *Body `json:"body,omitempty"`
}

// ResetFormat says how X-RateLimit-Reset gives the reset; the API's enum
// (v1alpha1.ResetFormat) has the same values.
type ResetFormat string

// The reset formats.
const (
	// ResetSeconds is the seconds from now, rounded up.
	ResetSeconds ResetFormat = "Seconds"
	// ResetUnixTime is the Unix time in seconds, rounded up.
	ResetUnixTime ResetFormat = "UnixTime"
)

// BodyFormat selects a limited request's body; the API's enum (v1alpha1.BodyFormat) has the
// same values.
type BodyFormat string

// The body formats.
const (
	BodyJSON     BodyFormat = "JSON"
	BodyOpenAI   BodyFormat = "OpenAI"
	BodyText     BodyFormat = "Text"
	BodyTemplate BodyFormat = "Template"
)

// Body is a limited request's body: a Format, and for BodyTemplate the Template (Go
// text/template syntax over TemplateData, see ParseTemplate) and its ContentType.
type Body struct {
	Format      BodyFormat `json:"format"`
	ContentType string     `json:"contentType,omitempty"`
	Template    string     `json:"template,omitempty"`
}

// HeaderStyle selects the rate-limit headers of a sidecar's answers.
type HeaderStyle string

// The header styles; the API's enum (v1alpha1.HeaderStyle) has the same values.
const (
	// HeadersDraft sends the IETF draft's RateLimit and RateLimit-Policy fields.
	HeadersDraft HeaderStyle = "Draft"
	// HeadersLegacy sends X-RateLimit-Limit, -Remaining and -Reset.
	HeadersLegacy HeaderStyle = "Legacy"
	// HeadersBoth sends both.
	HeadersBoth HeaderStyle = "Both"
	// HeadersNone sends neither; Retry-After goes with a rejection in every style.
	HeadersNone HeaderStyle = "None"
	// HeadersDraft7 sends the draft's version 07 combined field, RateLimit: limit=,
	// remaining=, reset=, and RateLimit-Policy: limit;w=window.
	HeadersDraft7 HeaderStyle = "Draft7"
	// HeadersOpenAI sends OpenAI's x-ratelimit-limit-, -remaining- and -reset-requests (and
	// -tokens, for a rule whose cost comes from the response).
	HeadersOpenAI HeaderStyle = "OpenAI"
)

// Valid reports whether h is one of the styles.
func (h HeaderStyle) Valid() bool {
	switch h {
	case HeadersDraft, HeadersLegacy, HeadersBoth, HeadersNone, HeadersDraft7, HeadersOpenAI:
		return true
	}
	return false
}

// Draft reports whether the style includes the draft's fields.
func (h HeaderStyle) Draft() bool { return h == HeadersDraft || h == HeadersBoth }

// Legacy reports whether the style includes the X-RateLimit- headers.
func (h HeaderStyle) Legacy() bool { return h == HeadersLegacy || h == HeadersBoth }

// Rule is one limit with integer parameters.
type Rule struct {
	Name      string    `json:"name"`
	Match     *Match    `json:"match,omitempty"`
	Key       []KeyPart `json:"key"`
	Algorithm string    `json:"algorithm"`
	Limit     int64     `json:"limit"`
	// WindowMs is the window; 0 for a calendar rule. For a Concurrency rule it is how long a
	// holding lasts in Redis unless its sidecar renews it (the controller renders SlotExpiry).
	WindowMs int64 `json:"windowMs"`
	// Calendar, when set, makes a FixedWindow count per calendar period of a time zone.
	Calendar *Calendar `json:"calendar,omitempty"`
	// Burst is the bucket capacity (TokenBucket and LeakyBucket only; Limit when unset).
	Burst int64 `json:"burst,omitempty"`
	// LeakyMode is Meter or Queue for LeakyBucket, empty otherwise.
	LeakyMode  string `json:"leakyMode,omitempty"`
	MaxDelayMs int64  `json:"maxDelayMs,omitempty"`
	Cost       int64  `json:"cost"`
	// CostHeader is the canonical name of the header that may carry the cost.
	CostHeader string   `json:"costHeader,omitempty"`
	Mode       RuleMode `json:"mode"`
	// Headers, when set, is the rule's header style, over the policy's Response.Headers.
	Headers HeaderStyle `json:"headers,omitempty"`
	// Lease, when set, makes the sidecars lease units of the shared limit in advance and
	// spend them locally (package lease); nil decides every request in the store.
	Lease *Lease `json:"lease,omitempty"`
	// CountWhen, when not empty, lists the response statuses whose requests count: the
	// request is checked at admission and charged after the response only if its status is
	// in one of the ranges.
	CountWhen []StatusRange `json:"countWhen,omitempty"`
	// ResponseCost, when set, takes the request's cost from its response: Cost (its
	// minimumCost) is charged at admission, and what the response reports beyond it when the
	// response ends.
	ResponseCost *ResponseCost `json:"responseCost,omitempty"`
	// Tenants, when set, gives the rule another limit (and burst) for some values of one of its
	// key parts: each tenant's entry replaces Limit and Burst for the requests whose part has
	// that value; every other request gets the rule's own.
	Tenants *Tenants `json:"tenants,omitempty"`
	// Adaptive, set only on a Concurrency rule with no key, makes it each pod's own limit on
	// the requests it matches in flight to the application, adapted to the application's
	// latency from Adaptive.MinLimit up to Limit; not shared through Redis, and not decided
	// with the other rules: a request it sheds reaches none of them.
	Adaptive *Adaptive `json:"adaptive,omitempty"`
}

// Tenants is a rule's table of limits per tenant, the value of one of its key parts.
type Tenants struct {
	// Part is the index in Rule.Key of the part whose value names the tenant.
	Part int `json:"part"`
	// Limits are the tenants' limits, sorted by Value and distinct.
	Limits []TenantLimit `json:"limits"`
}

// TenantLimit is one tenant's limit: Limit in place of the rule's (0 denies every request of
// the tenant, as a rule of limit 0 does) and, for TokenBucket and LeakyBucket, Burst in place
// of the rule's burst (the writer applies its default: never 0 for a bucket with a limit); 0
// for the other algorithms.
type TenantLimit struct {
	// Value is the key part's value that names the tenant, as a request carries it.
	Value string `json:"value"`
	Limit int64  `json:"limit"`
	Burst int64  `json:"burst,omitempty"`
}

// WithLimit returns r with limit and burst in place of its own, and no Tenants: what one of its
// tenants, or an Envoy descriptor's limit override, gets. Burst applies to TokenBucket and
// LeakyBucket only (for the others it is ignored). A limit of 0 makes a Blocked rule, without
// what a blocked rule does not take (cost, costHeader, lease, countWhen, responseCost, Queue).
// A lease's maxUnits is capped at the new capacity, and the cost at it, so the rule stays valid.
func (r Rule) WithLimit(limit, burst int64) Rule {
	r.Tenants = nil
	r.Limit, r.Burst = limit, 0
	if r.Algorithm == string(limiter.TokenBucket) || r.Algorithm == string(limiter.LeakyBucket) {
		r.Burst = burst
	}
	if limit == 0 {
		r.Burst, r.Cost, r.CostHeader, r.Lease, r.CountWhen, r.ResponseCost = 0, 1, "", nil, nil, nil
		if r.LeakyMode == string(limiter.Queue) {
			r.LeakyMode, r.MaxDelayMs = string(limiter.Meter), 0
		}
		return r
	}
	capacity := r.LimiterLimit().Capacity()
	if r.Lease != nil && r.Lease.MaxUnits > capacity {
		l := *r.Lease
		l.MaxUnits = capacity
		r.Lease = &l
	}
	r.Cost = min(r.Cost, max(capacity, 1))
	return r
}

// WithWindow returns r counting per windowMs, or per cal when cal is set (then windowMs is
// 0): what an Envoy descriptor's limit override in another unit gets. A Concurrency rule has
// no window to change.
// A calendar rule takes no lease.
func (r Rule) WithWindow(windowMs int64, cal *Calendar) Rule {
	r.WindowMs, r.Calendar = windowMs, cal
	if cal != nil {
		r.WindowMs, r.Lease = 0, nil
	}
	return r
}

// SlotExpiry is the WindowMs the controller renders for a Concurrency rule: a holding that its
// sidecar stops renewing (the sidecar died or lost Redis) is freed at most this long after
// its last renewal. The sidecars renew each holding every third of it.
const SlotExpiry = 30 * time.Second

// ResponseCost is where a response reports its request's cost: exactly one of Header and
// JSONField.
type ResponseCost struct {
	// Header is the canonical name of the response header whose value is the cost.
	Header string `json:"header,omitempty"`
	// JSONField is the dotted path of object keys to the cost in a JSON body, or in the last
	// server-sent event that carries it.
	JSONField string `json:"jsonField,omitempty"`
}

// MaxJSONFieldDepth bounds the keys of a ResponseCost's JSONField.
const MaxJSONFieldDepth = 16

// Path is JSONField's keys, outermost first; nil for a header.
func (rc ResponseCost) Path() []string {
	if rc.JSONField == "" {
		return nil
	}
	return strings.Split(rc.JSONField, ".")
}

func (rc ResponseCost) validate() error {
	if (rc.Header == "") == (rc.JSONField == "") {
		return errors.New("responseCost needs exactly one of header and jsonField")
	}
	if path := rc.Path(); len(path) > MaxJSONFieldDepth || slices.Contains(path, "") {
		return fmt.Errorf("responseCost.jsonField %q is not a dotted path of at most %d keys", rc.JSONField, MaxJSONFieldDepth)
	}
	return nil
}

// StatusRange is an inclusive range of HTTP statuses, Lo <= Hi, both in 100..599.
type StatusRange struct {
	Lo int `json:"lo"`
	Hi int `json:"hi"`
}

// Counts reports whether status is in one of the ranges.
func Counts(ranges []StatusRange, status int) bool {
	for _, r := range ranges {
		if r.Lo <= status && status <= r.Hi {
			return true
		}
	}
	return false
}

// Calendar is a calendar window: Period (limiter.Day, Week or Month) in the IANA TimeZone.
type Calendar struct {
	Period   string `json:"period"`
	TimeZone string `json:"timeZone"`
}

// Lease is a rule's leasing parameters.
type Lease struct {
	// MaxAgeMs is how long leased units stay usable, 1..10000 ms.
	MaxAgeMs int64 `json:"maxAgeMs"`
	// MaxUnits caps one lease, 1..the limit's capacity; 0 means derived from the rate.
	MaxUnits int64 `json:"maxUnits,omitempty"`
}

// MaxAge is MaxAgeMs as a Duration.
func (l Lease) MaxAge() time.Duration { return time.Duration(l.MaxAgeMs) * time.Millisecond }

// RuleMode says whether a rule rejects requests or only counts them.
type RuleMode string

// The rule modes; the API's enum (v1alpha1.RuleMode) has the same values.
const (
	// Enforce rejects (or delays) requests over the limit.
	Enforce RuleMode = "Enforce"
	// Shadow counts and reports, but never rejects or delays.
	Shadow RuleMode = "Shadow"
)

// Match selects requests; header names are canonical (textproto.CanonicalMIMEHeaderKey).
// A Match with Descriptors selects Envoy descriptors, not HTTP requests: its rule is a
// descriptor rule (see Rule.Descriptor), which sidecars skip and the RLS server decides.
type Match struct {
	PathPrefix string        `json:"pathPrefix,omitempty"`
	Methods    []string      `json:"methods,omitempty"`
	Headers    []HeaderMatch `json:"headers,omitempty"`
	// Descriptors, in order, are the entries of the descriptors the rule matches: exactly
	// these keys in this order, each with Value when Value is not empty.
	Descriptors []DescriptorEntry `json:"descriptors,omitempty"`
	// Routes, when not empty, are the matches of the Gateway API HTTPRoute rules a policy is
	// attached to: a request must also satisfy at least one of them.
	Routes []RouteMatch `json:"routes,omitempty"`
	// JWT, when set, is JWTVerified (the request's token verifies under the policy's JWT) or
	// JWTUnverified (it has none, or it fails).
	JWT string `json:"jwt,omitempty"`
}

// RouteMatch is one match of an HTTPRoute rule: a request satisfies it when it meets every
// condition given. At most one of PathExact and PathPrefix is set.
type RouteMatch struct {
	// PathExact is the whole path.
	PathExact string `json:"pathExact,omitempty"`
	// PathPrefix is a prefix matched element by element, as Gateway API's PathPrefix: /api
	// (or /api/) matches /api and /api/x, not /apix.
	PathPrefix string `json:"pathPrefix,omitempty"`
	// Method is the request's method.
	Method string `json:"method,omitempty"`
	// Headers are headers the request carries with exactly these values (names canonical).
	Headers []HeaderMatch `json:"headers,omitempty"`
}

// PathHasPrefix reports whether path starts with prefix element by element, as Gateway API's
// PathPrefix matches: a trailing / of prefix is ignored, and / matches every path.
func PathHasPrefix(path, prefix string) bool {
	prefix = strings.TrimRight(prefix, "/")
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || path[len(prefix)] == '/'
}

// DescriptorEntry is one entry of an Envoy descriptor: it matches Value (any value when
// empty) but none of NotIn; a Value (or a NotIn value) ending in * stands for every value that
// starts with what precedes the *.
type DescriptorEntry struct {
	Key   string   `json:"key"`
	Value string   `json:"value,omitempty"`
	NotIn []string `json:"notIn,omitempty"`
}

// Matches reports whether an entry's value v meets e: equal to Value (or prefixed by it,
// for a wildcard; any value without Value) and none of NotIn.
func (e DescriptorEntry) Matches(v string) bool {
	if e.Value != "" && !wildcardMatch(e.Value, v) {
		return false
	}
	for _, n := range e.NotIn {
		if wildcardMatch(n, v) {
			return false
		}
	}
	return true
}

// wildcardMatch reports whether v is pattern, or starts with pattern's prefix when pattern
// ends in *, as envoyproxy/ratelimit's wildcard values match.
func wildcardMatch(pattern, v string) bool {
	if prefix, wild := strings.CutSuffix(pattern, "*"); wild {
		return strings.HasPrefix(v, prefix)
	}
	return v == pattern
}

// Descriptor reports whether r is a descriptor rule: one the RLS server decides for its
// policy's Domain, and sidecars skip.
func (r Rule) Descriptor() bool { return r.Match != nil && len(r.Match.Descriptors) > 0 }

// HeaderMatch is a condition on the header Name: with Absent, the header is absent; with
// NotIn, its value is none of NotIn or it is absent; otherwise it is present with exactly Value.
type HeaderMatch struct {
	Name   string   `json:"name"`
	Value  string   `json:"value"`
	Absent bool     `json:"absent,omitempty"`
	NotIn  []string `json:"notIn,omitempty"`
}

// Key part sources.
const (
	SourceClientIP = "clientIP"
	SourceHeader   = "header"
	SourcePath     = "path"
	SourceMethod   = "method"
	SourceQuery    = "query"
	// SourceDescriptor keys by the value of the descriptor entry whose key is Name
	// (descriptor rules only).
	SourceDescriptor = "descriptor"
)

// KeyPart is one part of a rule's key: a source and, for header and query, a name (canonical
// for headers).
type KeyPart struct {
	Source string `json:"source"`
	Name   string `json:"name,omitempty"`
}

// Blocked reports whether r denies every request it matches (limit 0).
func (r Rule) Blocked() bool { return r.Limit == 0 }

// LimiterLimit returns the limiter parameters of the rule. A calendar rule whose zone does
// not load gets no Zone, which Validate rejects (validate names the zone's error). A Blocked
// rule gets a one-unit stand-in of its algorithm and window, which the data plane makes deny
// every request by giving it a cost above that capacity.
func (r Rule) LimiterLimit() limiter.Limit {
	if r.Blocked() {
		r.Limit, r.Burst = 1, 0
	}
	if c := r.Calendar; c != nil {
		zone, _ := limiter.LoadZone(c.TimeZone)
		p := limiter.Period(c.Period)
		return limiter.Limit{Algorithm: limiter.Algorithm(r.Algorithm), Limit: r.Limit, Window: p.Nominal(), Period: p, Zone: zone}
	}
	return limiter.Limit{
		Algorithm: limiter.Algorithm(r.Algorithm),
		Limit:     r.Limit,
		Window:    time.Duration(r.WindowMs) * time.Millisecond,
		Burst:     r.Burst,
		Mode:      limiter.LeakyMode(r.LeakyMode),
		MaxDelay:  time.Duration(r.MaxDelayMs) * time.Millisecond,
	}
}

// Selects reports whether the policy applies to a pod with these labels; never when the
// policy has no Selector.
func (p Policy) Selects(podLabels map[string]string) bool {
	return p.Selector.Matches(podLabels)
}
