// Package policy defines policies.json, the rendered form of a namespace's RateLimitPolicies
// that injected sidecars read, and its typed vocabularies (failure modes, header styles, rule
// modes). It is the one contract between the controller and `sluicectl render` (writers, both
// through package render, which compiles API objects into this format) and the sidecar and the
// RLS server (readers). It does not know the API types, so that readers do not link them.
package policy

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

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
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
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
)

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
	// WindowMs is the window; 0 for a calendar rule.
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
}

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
}

// DescriptorEntry is one entry of an Envoy descriptor; an empty Value matches any value.
type DescriptorEntry struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
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

// validate checks that each header condition of m (nil: every request) sets one of Value,
// Absent and NotIn.
func (m *Match) validate() error {
	if m == nil {
		return nil
	}
	for _, h := range m.Headers {
		if h.Absent && (h.Value != "" || len(h.NotIn) > 0) || len(h.NotIn) > 0 && h.Value != "" {
			return fmt.Errorf("header match %s sets more than one of value, absent, notIn", h.Name)
		}
	}
	return nil
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

// LimiterLimit returns the limiter parameters of the rule. A calendar rule whose zone does
// not load gets no Zone, which Validate rejects (validate names the zone's error).
func (r Rule) LimiterLimit() limiter.Limit {
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
	if p.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Selector)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(podLabels))
}

// Validate checks what a reader relies on: known values, limits inside the exact-arithmetic
// bounds, parseable selectors and networks. It is the sidecar's guard against a bad file.
func (d *Document) Validate() error {
	if d.Version != Version {
		return fmt.Errorf("version %d is not the supported version %d", d.Version, Version)
	}
	var errs []error
	for i, p := range d.Policies {
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("policies[%d] (%s): %w", i, p.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Validate checks one policy as Document.Validate does; render calls it on what it compiled.
func (p Policy) Validate() error {
	if p.Selector == nil && p.Domain == "" {
		return errors.New("neither a selector nor a domain: nothing would enforce the policy")
	}
	if _, err := metav1.LabelSelectorAsSelector(p.Selector); err != nil {
		return fmt.Errorf("selector: %w", err)
	}
	switch p.FailureMode {
	case FailureLocal, FailureOpen, FailureClosed:
	default:
		return fmt.Errorf("failureMode %q is not Local, Open or Closed", p.FailureMode)
	}
	for _, c := range p.TrustedProxies {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("trustedProxies: %w", err)
		}
	}
	if p.Response.StatusCode < 400 || p.Response.StatusCode > 599 {
		return fmt.Errorf("response.statusCode %d is outside 400..599", p.Response.StatusCode)
	}
	switch p.Response.Headers {
	case HeadersDraft, HeadersLegacy, HeadersBoth, HeadersNone:
	default:
		return fmt.Errorf("response.headers %q is not Draft, Legacy, Both or None", p.Response.Headers)
	}
	if p.Pods != nil {
		if int(p.Replicas) != len(p.Pods) {
			return fmt.Errorf("replicas %d is not the number of pods listed, %d", p.Replicas, len(p.Pods))
		}
		for i := 1; i < len(p.Pods); i++ {
			if p.Pods[i-1] >= p.Pods[i] {
				return fmt.Errorf("pods are not sorted and distinct at %q, %q", p.Pods[i-1], p.Pods[i])
			}
		}
	}
	if p.Replicas < 0 {
		return fmt.Errorf("replicas %d is negative", p.Replicas)
	}
	if len(p.Rules) == 0 {
		return errors.New("no rules")
	}
	for _, r := range p.Rules {
		if err := errors.Join(r.validate(), r.Match.validate()); err != nil {
			return fmt.Errorf("rule %s: %w", r.Name, err)
		}
		if r.Descriptor() && p.Domain == "" {
			return fmt.Errorf("rule %s matches descriptors but the policy has no domain", r.Name)
		}
		if r.Descriptor() && r.LeakyMode == string(limiter.Queue) {
			return fmt.Errorf("rule %s matches descriptors and queues, which Envoy's rate limit service cannot", r.Name)
		}
		if r.Descriptor() && len(r.CountWhen) > 0 {
			return fmt.Errorf("rule %s matches descriptors and has countWhen, which Envoy's rate limit service cannot: it never sees the response", r.Name)
		}
		if r.Descriptor() && r.ResponseCost != nil {
			return fmt.Errorf("rule %s matches descriptors and has responseCost, which Envoy's rate limit service cannot: it never sees the response", r.Name)
		}
	}
	return nil
}

// validateResponseCost checks r's responseCost, if any, and what it does not combine with.
func (r Rule) validateResponseCost() error {
	rc := r.ResponseCost
	if rc == nil {
		return nil
	}
	if err := rc.validate(); err != nil {
		return err
	}
	switch {
	case !r.LimiterLimit().LateChargeable():
		return fmt.Errorf("responseCost applies only to FixedWindow and TokenBucket, not %s", r.Algorithm)
	case r.CostHeader != "":
		return errors.New("responseCost and costHeader are both set")
	case len(r.CountWhen) > 0:
		return errors.New("responseCost and countWhen are both set")
	case r.Lease != nil:
		return errors.New("responseCost and lease are both set: leased units are spent in advance")
	}
	return nil
}

func (r Rule) validate() error {
	if c := r.Calendar; c != nil {
		if r.WindowMs != 0 {
			return errors.New("calendar and windowMs are both set")
		}
		if _, err := limiter.LoadZone(c.TimeZone); err != nil {
			return fmt.Errorf("calendar: %w", err)
		}
	}
	if err := r.LimiterLimit().Validate(); err != nil {
		return err
	}
	if r.Cost < 1 || r.Cost > r.LimiterLimit().Capacity() {
		return fmt.Errorf("cost %d is outside 1..%d", r.Cost, r.LimiterLimit().Capacity())
	}
	for _, sr := range r.CountWhen {
		if sr.Lo < 100 || sr.Hi > 599 || sr.Lo > sr.Hi {
			return fmt.Errorf("countWhen range %d-%d is not within 100..599", sr.Lo, sr.Hi)
		}
	}
	if len(r.CountWhen) > 0 && !r.LimiterLimit().LateChargeable() {
		return fmt.Errorf("countWhen applies only to FixedWindow and TokenBucket, not %s", r.Algorithm)
	}
	if err := r.validateResponseCost(); err != nil {
		return err
	}
	if r.Mode != Enforce && r.Mode != Shadow {
		return fmt.Errorf("mode %q is not Enforce or Shadow", r.Mode)
	}
	if l := r.Lease; l != nil {
		if err := r.LimiterLimit().Leasable(); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		if l.MaxAge() < limiter.MinLeaseAge || l.MaxAge() > limiter.MaxLeaseAge {
			return fmt.Errorf("lease.maxAgeMs %d is outside %d..%d", l.MaxAgeMs, limiter.MinLeaseAge.Milliseconds(), limiter.MaxLeaseAge.Milliseconds())
		}
		if l.MaxUnits < 0 || l.MaxUnits > r.LimiterLimit().Capacity() {
			return fmt.Errorf("lease.maxUnits %d is outside 0..%d (0: derived from the rate)", l.MaxUnits, r.LimiterLimit().Capacity())
		}
	}
	if len(r.Key) == 0 {
		return errors.New("empty key")
	}
	for _, k := range r.Key {
		if (k.Source == SourceDescriptor) != r.Descriptor() {
			return fmt.Errorf("key part %s in a rule that does not match descriptors, or an HTTP key part in one that does", k.Source)
		}
		switch k.Source {
		case SourceClientIP, SourcePath, SourceMethod:
		case SourceHeader, SourceQuery:
			if k.Name == "" {
				return fmt.Errorf("key part %s without a name", k.Source)
			}
		case SourceDescriptor:
			if !slices.ContainsFunc(r.Match.Descriptors, func(e DescriptorEntry) bool { return e.Key == k.Name }) {
				return fmt.Errorf("key part descriptor %q is not one of the descriptor entries the rule matches", k.Name)
			}
		default:
			return fmt.Errorf("key part source %q is unknown", k.Source)
		}
	}
	return nil
}

// Parse decodes and validates a rendered document.
func Parse(data []byte) (*Document, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var d Document
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", DataKey, err)
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("invalid %s: %w", DataKey, err)
	}
	return &d, nil
}

// Marshal encodes a document deterministically and compactly: policies sorted by the caller
// (render.Build sorts), fields in declaration order, no indentation, a final newline.
func Marshal(d *Document) ([]byte, error) {
	if d.Policies == nil {
		d.Policies = []Policy{}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// MarshalIndent is Marshal with two-space indentation, for people to read (sluicectl render
// --pretty); readers accept both.
func MarshalIndent(d *Document) ([]byte, error) {
	b, err := Marshal(d)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Payload is a document encoded as the ConfigMap's data and binaryData.
type Payload struct {
	Data       map[string]string
	BinaryData map[string][]byte
	// Hash is Hash of the compact document, compressed or not.
	Hash string
	// Plain is the size of the compact document.
	Plain int
}

// Size is what the payload counts against MaxConfigMapBytes: the keys' values.
func (p *Payload) Size() int {
	n := 0
	for _, v := range p.Data {
		n += len(v)
	}
	for _, v := range p.BinaryData {
		n += len(v)
	}
	return n
}

// envelope is what DataKey holds when the document is compressed.
type envelope struct {
	Version   int    `json:"version"`
	Namespace string `json:"namespace"`
	Encoding  string `json:"encoding"`
	Key       string `json:"key"`
	// SHA256 is the hash of the compressed bytes, so a reader notices a torn pair of files.
	SHA256 string `json:"sha256"`
}

// Encode encodes d for a ConfigMap: the compact document under DataKey when it is at most
// CompressThreshold bytes; otherwise its gzip under CompressedKey (binaryData) and, under
// DataKey, an envelope of version CompressedVersion that names it. The output is deterministic.
func Encode(d *Document) (*Payload, error) {
	plain, err := Marshal(d)
	if err != nil {
		return nil, err
	}
	p := &Payload{Hash: Hash(plain), Plain: len(plain)}
	if len(plain) <= CompressThreshold {
		p.Data = map[string]string{DataKey: string(plain)}
		return p, nil
	}
	var buf bytes.Buffer
	// klauspost/compress's level 3 (any gzip reader reads it): measured on 2.7 MB of policies,
	// 4 to 10 times faster than compress/gzip's default level with output as small or smaller,
	// which is what a controller rendering large namespaces on every change pays.
	zw, _ := kgzip.NewWriterLevel(&buf, 3) // a valid level: no error
	if _, err := zw.Write(plain); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	env, err := json.Marshal(envelope{Version: CompressedVersion, Namespace: d.Namespace, Encoding: "gzip", Key: CompressedKey, SHA256: Hash(buf.Bytes())})
	if err != nil {
		return nil, err
	}
	p.Data = map[string]string{DataKey: string(env) + "\n"}
	p.BinaryData = map[string][]byte{CompressedKey: buf.Bytes()}
	return p, nil
}

// CompressedFile reports whether data (the content of DataKey) is an envelope, and the name
// of the file beside it that holds the compressed document.
func CompressedFile(data []byte) (key string, ok bool) {
	var env envelope
	if json.Unmarshal(data, &env) != nil || env.Version != CompressedVersion {
		return "", false
	}
	if env.Key != CompressedKey {
		return "", false // the only name a reader opens: never a path from the file
	}
	return env.Key, true
}

// Decode decodes and validates what a ConfigMap holds: data is DataKey's content and
// compressed CompressedKey's (nil when absent). A plain document is Parse(data); an envelope
// needs compressed, whose hash it checks before inflating at most 64 MiB of it.
func Decode(data, compressed []byte) (*Document, error) {
	var env envelope
	if json.Unmarshal(data, &env) != nil || env.Version != CompressedVersion {
		return Parse(data)
	}
	if env.Encoding != "gzip" || env.Key != CompressedKey {
		return nil, fmt.Errorf("%s: encoding %q under key %q is not gzip under %s", DataKey, env.Encoding, env.Key, CompressedKey)
	}
	if compressed == nil {
		return nil, fmt.Errorf("%s names %s, which is missing", DataKey, CompressedKey)
	}
	if Hash(compressed) != env.SHA256 {
		return nil, fmt.Errorf("%s does not have the hash %s names (a torn update?)", CompressedKey, DataKey)
	}
	zr, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CompressedKey, err)
	}
	plain, err := io.ReadAll(io.LimitReader(zr, maxDecompressed+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CompressedKey, err)
	}
	if len(plain) > maxDecompressed {
		return nil, fmt.Errorf("%s inflates to more than %d bytes", CompressedKey, maxDecompressed)
	}
	return Parse(plain)
}

// Hash is the content hash written to HashAnnotation.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
