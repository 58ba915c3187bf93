package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Algorithm is the rate-limiting algorithm of a rule, or Concurrency, which bounds the
// requests in flight rather than their rate.
// +kubebuilder:validation:Enum=FixedWindow;SlidingWindowLog;SlidingWindowCounter;TokenBucket;LeakyBucket;Concurrency
type Algorithm string

// The algorithms.
const (
	FixedWindow          Algorithm = "FixedWindow"
	SlidingWindowLog     Algorithm = "SlidingWindowLog"
	SlidingWindowCounter Algorithm = "SlidingWindowCounter"
	TokenBucket          Algorithm = "TokenBucket"
	LeakyBucket          Algorithm = "LeakyBucket"
	Concurrency          Algorithm = "Concurrency"
)

// FailureMode is what a sidecar does while Redis is unreachable.
// +kubebuilder:validation:Enum=Local;Open;Closed
type FailureMode string

// The failure modes.
const (
	// FailureLocal decides with an in-process limiter holding this pod's share of each limit.
	FailureLocal FailureMode = "Local"
	// FailureOpen admits every request.
	FailureOpen FailureMode = "Open"
	// FailureClosed rejects every request with 503.
	FailureClosed FailureMode = "Closed"
)

// HeaderStyle selects the rate-limit headers a sidecar adds to responses.
// +kubebuilder:validation:Enum=Draft;Legacy;Both;None;Draft7;OpenAI
type HeaderStyle string

// The header styles.
const (
	HeadersDraft  HeaderStyle = "Draft"
	HeadersLegacy HeaderStyle = "Legacy"
	HeadersBoth   HeaderStyle = "Both"
	HeadersNone   HeaderStyle = "None"
	// HeadersDraft7 is the combined field of the IETF draft's version 07,
	// RateLimit: limit=100, remaining=50, reset=5, with RateLimit-Policy: 100;w=60.
	HeadersDraft7 HeaderStyle = "Draft7"
	// HeadersOpenAI is OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}.
	HeadersOpenAI HeaderStyle = "OpenAI"
)

// ResetFormat says how X-RateLimit-Reset gives the reset.
// +kubebuilder:validation:Enum=Seconds;UnixTime
type ResetFormat string

// The reset formats.
const (
	// ResetSeconds is the number of seconds from now, rounded up.
	ResetSeconds ResetFormat = "Seconds"
	// ResetUnixTime is the Unix time, in seconds, of the reset (rounded up), as GitHub's API
	// sends it.
	ResetUnixTime ResetFormat = "UnixTime"
)

// BodyFormat selects the body of a limited request's answer.
// +kubebuilder:validation:Enum=JSON;OpenAI;Text;Template
type BodyFormat string

// The body formats.
const (
	// BodyJSON is Sluice's JSON object: error, message, reason, retry_after, limit,
	// remaining, reset_at, policy, rule.
	BodyJSON BodyFormat = "JSON"
	// BodyOpenAI is OpenAI's error object, {"error": {"message", "type", "code"}}, with code
	// rate_limit_exceeded, which OpenAI's SDKs parse.
	BodyOpenAI BodyFormat = "OpenAI"
	// BodyText is the message alone, as text/plain.
	BodyText BodyFormat = "Text"
	// BodyTemplate is the user's template.
	BodyTemplate BodyFormat = "Template"
)

// RuleMode says whether a rule rejects requests or only counts them.
// +kubebuilder:validation:Enum=Enforce;Shadow
type RuleMode string

// The rule modes.
const (
	Enforce RuleMode = "Enforce"
	Shadow  RuleMode = "Shadow"
)

// LeakyBucketMode is what LeakyBucket does with a request that finds the bucket non-empty.
// +kubebuilder:validation:Enum=Meter;Queue
type LeakyBucketMode string

// The leaky bucket modes.
const (
	Meter LeakyBucketMode = "Meter"
	Queue LeakyBucketMode = "Queue"
)

// HTTPMethod is an HTTP request method.
// +kubebuilder:validation:Enum=GET;HEAD;POST;PUT;PATCH;DELETE;OPTIONS;CONNECT;TRACE
type HTTPMethod string

// HeaderName is an HTTP header field name (an RFC 9110 token).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=256
// +kubebuilder:validation:XValidation:rule="self.matches(\"^[-A-Za-z0-9!#$%&'*+.^_|~]+$\")",message="must be an HTTP header name: letters, digits and !#$%&'*+-.^_|~"
type HeaderName string

// CIDR is an IPv4 or IPv6 network in CIDR notation.
// +kubebuilder:validation:MaxLength=43
// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.0.0.0/8 or fd00::/8 (use /32 or /128 for one address)"
type CIDR string

// Window is a duration in whole milliseconds between 1ms and 24h, written as a Go duration.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) >= duration('1ms') && duration(self) <= duration('24h')",message="must be a duration in whole milliseconds from 1ms to 24h, such as 500ms, 1s, 1m or 1h30m"
type Window string

// Delay is a duration in whole milliseconds between 0 and 24h, written as a Go duration.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) <= duration('24h')",message="must be a duration in whole milliseconds from 0s to 24h, such as 0s, 250ms or 2s"
type Delay string

// LeaseAge is a duration in whole milliseconds between 1ms and 10s, written as a Go duration.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) >= duration('1ms') && duration(self) <= duration('10s')",message="must be a duration in whole milliseconds from 1ms to 10s, such as 10ms, 100ms or 1s"
type LeaseAge string

// DescriptorKey is the key of an Envoy rate limit descriptor entry, e.g. generic_key,
// remote_address, header_match or a custom descriptor_key.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=256
// +kubebuilder:validation:XValidation:rule="self.matches('^[!-~]+$')",message="must be printable ASCII without spaces"
type DescriptorKey string

// RateLimitPolicySpec is what a user declares: which pods or Envoy domain, which requests,
// which limits.
// +kubebuilder:validation:XValidation:rule="has(self.podSelector) || has(self.targetRefs) || has(self.domain)",message="set podSelector or targetRefs (sidecars enforce the policy), domain (the RLS server serves it to Envoy), or both"
// +kubebuilder:validation:XValidation:rule="!has(self.podSelector) || !has(self.targetRefs)",message="set exactly one of podSelector and targetRefs: each says which pods enforce the policy"
// +kubebuilder:validation:XValidation:rule="has(self.domain) || self.rules.all(r, !has(r.match) || !has(r.match.descriptors))",message="rules that match descriptors need spec.domain: only Envoy sends descriptors",fieldPath=".domain"
// +kubebuilder:validation:XValidation:rule="has(self.podSelector) || has(self.targetRefs) || self.rules.all(r, has(r.match) && has(r.match.descriptors))",message="without podSelector or targetRefs every rule must match descriptors (match.descriptors): a rule on HTTP requests needs sidecars",fieldPath=".podSelector"
// +kubebuilder:validation:XValidation:rule="has(self.jwt) || self.rules.all(r, r.key.all(k, !has(k.jwtClaim)) && (!has(r.match) || !has(r.match.jwt)))",message="a rule that keys on jwtClaim or matches on jwt needs spec.jwt: how to verify the token",fieldPath=".jwt"
// +kubebuilder:validation:XValidation:rule="!has(self.jwt) || self.rules.exists(r, r.key.exists(k, has(k.jwtClaim)) || (has(r.match) && has(r.match.jwt)))",message="jwt applies only to rules that key on jwtClaim or match on jwt: Sluice verifies a token to count its caller, it never rejects a request for it",fieldPath=".jwt"
type RateLimitPolicySpec struct {
	// podSelector selects the pods of this namespace whose injected sidecars enforce this
	// policy's HTTP rules (those without match.descriptors). An empty selector ({}) selects
	// every pod of the namespace; when omitted, no pod enforces the policy (set targetRefs or
	// domain). Not with targetRefs.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// targetRefs attaches the policy to objects of this namespace, as Gateway API's policy
	// attachment does, instead of podSelector: a Service (group "", kind Service), whose
	// selector's pods enforce the policy (sectionName names one of its ports, which must
	// exist), or an HTTPRoute (group gateway.networking.k8s.io, kind HTTPRoute), whose backend
	// Services' pods enforce the policy and whose rules' matches (path, method, headers) each
	// HTTP rule additionally matches, so the policy counts only the route's traffic
	// (sectionName names one route rule). status.targets reports each target.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.filter(b, b.group == a.group && b.kind == a.kind && b.name == a.name && (has(b.sectionName) ? b.sectionName : '') == (has(a.sectionName) ? a.sectionName : '')).size() == 1)",message="each target appears once"
	TargetRefs []TargetRef `json:"targetRefs,omitempty"`

	// domain is the Envoy rate limit domain whose requests the Sluice RLS server
	// (sluice-ratelimit) decides with this policy's descriptor rules (those with
	// match.descriptors), as a domain of envoyproxy/ratelimit's configuration. Policies of any
	// namespace may serve the same domain; all their matching rules apply.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[!-~]+$')",message="must be printable ASCII without spaces"
	Domain string `json:"domain,omitempty"`

	// failureMode is what a sidecar does while Redis is unreachable: Local (the default) decides
	// with an in-process limiter that holds this pod's share of each limit (the limit divided by
	// the number of ready pods the policy selects), Open admits every request, Closed rejects
	// every request with 503.
	// +optional
	// +kubebuilder:default=Local
	FailureMode FailureMode `json:"failureMode,omitempty"`

	// trustedProxies lists the networks of proxies whose X-Forwarded-For header is believed.
	// A request from any other peer is keyed by its TCP peer address, whatever it claims.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	TrustedProxies []CIDR `json:"trustedProxies,omitempty"`

	// response shapes the answer to a limited request and the headers of every answer.
	// +optional
	// +kubebuilder:default={}
	Response *ResponseSpec `json:"response,omitempty"`

	// jwt says how the sidecars verify the JSON Web Token whose claims the policy's rules key
	// on (key[].jwtClaim) or match (match.jwt): where the token is, the keys that sign it, the
	// algorithms, issuer and audiences it must have. Sluice does not reject a request for its
	// token: a request without a valid one is charged to each rule's "unverified" counter.
	// +optional
	JWT *JWTSpec `json:"jwt,omitempty"`

	// rules are the limits of this policy. A request is limited when any enforced rule that
	// matches it denies it. Rule names are unique within the policy.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Rules []Rule `json:"rules"`
}

// TargetRef names an object of the policy's namespace that the policy attaches to, in the
// shape of Gateway API's LocalPolicyTargetReferenceWithSectionName.
// +kubebuilder:validation:XValidation:rule="(size(self.group) == 0 && self.kind == 'Service') || (self.group == 'gateway.networking.k8s.io' && self.kind == 'HTTPRoute')",message="a target is a Service (group \"\", kind Service) or an HTTPRoute (group gateway.networking.k8s.io, kind HTTPRoute)"
type TargetRef struct {
	// group is the target's API group: "" for a Service, gateway.networking.k8s.io for an
	// HTTPRoute.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group"`

	// kind is the target's kind: Service or HTTPRoute.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// name is the target's name, in the policy's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// sectionName narrows the target: the name of one of a Service's ports, or of one of an
	// HTTPRoute's rules. The whole target when omitted.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be a port or route rule name: lower-case letters, digits and '-', starting and ending with a letter or digit"
	SectionName string `json:"sectionName,omitempty"`
}

// TargetStatus is what became of one of spec.targetRefs.
type TargetStatus struct {
	// targetRef is the target, as in spec.targetRefs.
	// +required
	TargetRef TargetRef `json:"targetRef"`

	// conditions: Accepted (the policy applies to this target), ResolvedRefs (the target
	// exists and its pods are known), Conflicted (an older policy defines a rule of the same
	// name for the same pods, so this one is not enforced).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=4
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ResponseSpec shapes a sidecar's responses.
type ResponseSpec struct {
	// statusCode is the HTTP status of a limited request, 400 to 599; 429 by default.
	// +optional
	// +kubebuilder:default=429
	// +kubebuilder:validation:Minimum=400
	// +kubebuilder:validation:Maximum=599
	StatusCode int32 `json:"statusCode,omitempty"`

	// headers selects the rate-limit headers added to responses: Draft (the IETF
	// RateLimit-Policy and RateLimit fields), Legacy (X-RateLimit-Limit, -Remaining, -Reset),
	// Both (the default), Draft7 (the draft's version 07 combined field, RateLimit:
	// limit=100, remaining=50, reset=5), OpenAI (x-ratelimit-limit-requests, ...-tokens for a
	// rule with responseCost) or None. A rule's own headers overrides it. Limited responses
	// carry Retry-After in every style. Every reset means how long until the next request can
	// pass: after a denial, the Retry-After; after an admission, until the remaining grows.
	// +optional
	// +kubebuilder:default=Both
	Headers HeaderStyle `json:"headers,omitempty"`

	// retryAfterMs adds retry-after-ms, the exact wait in milliseconds, beside the
	// whole-second Retry-After (rounded up) of limited responses: the header OpenAI's SDKs
	// read first. False by default.
	// +optional
	RetryAfterMs bool `json:"retryAfterMs,omitempty"`

	// legacyReset is how X-RateLimit-Reset (styles Legacy and Both) gives the reset: Seconds
	// from now (the default) or UnixTime, the Unix time in seconds, as GitHub's API does.
	// +optional
	// +kubebuilder:default=Seconds
	LegacyReset ResetFormat `json:"legacyReset,omitempty"`

	// body shapes the body of a limited request's answer; Sluice's JSON by default.
	// +optional
	Body *BodySpec `json:"body,omitempty"`
}

// BodySpec shapes the body of a limited request's answer.
// +kubebuilder:validation:XValidation:rule="(has(self.format) && self.format == 'Template') == has(self.template)",message="template is required with format Template and applies only to it"
// +kubebuilder:validation:XValidation:rule="!has(self.contentType) || (has(self.format) && self.format == 'Template')",message="contentType applies only to format Template"
type BodySpec struct {
	// format is JSON (the default: Sluice's object with error, message, reason, retry_after,
	// limit, remaining, reset_at, policy, rule), OpenAI (OpenAI's error object,
	// {"error": {"message", "type": "requests" or "tokens", "code": "rate_limit_exceeded"}}),
	// Text (the message, as text/plain) or Template.
	// +optional
	// +kubebuilder:default=JSON
	Format BodyFormat `json:"format,omitempty"`

	// contentType is the Content-Type of a Template body; text/plain; charset=utf-8 by
	// default.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-zA-Z0-9!#$&^_.+-]+/[a-zA-Z0-9!#$&^_.+-]+( *; *[a-zA-Z0-9!#$&^_.+-]+=[a-zA-Z0-9!#$&^_.+-]+)*$')",message="must be a media type, such as application/problem+json or text/plain; charset=utf-8"
	ContentType string `json:"contentType,omitempty"`

	// template is the body of format Template, in Go text/template syntax over the decision's
	// fields: .Policy, .Rule, .Reason (limited, cost_exceeds_capacity, delay_exceeds_max_delay,
	// no_local_share), .Limit, .Remaining (0), .RetryAfter (seconds, rounded up) and
	// .RetryAfterMs (both 0 and .CanRetry false when no wait lets the request pass), .ResetAt
	// (RFC 3339, empty without a retry), .Status and .Message (a sentence; quote it with json).
	// Supported: actions that print a field (as is, or quoted with the json function), if and
	// if not with else if, else and end, comments and trim markers; not range, with,
	// variables or other functions. docs/clients.md has the syntax and an example.
	// The controller parses it and rejects a policy whose template does not parse
	// (Accepted=False).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Template string `json:"template,omitempty"`
}

// AdaptiveSpec makes a Concurrency rule each pod's own protection of its application: the
// rule's limit on the requests in flight, one per pod for every request the rule matches (no
// key), adapts to the application's latency between minLimit and the rule's limit.
type AdaptiveSpec struct {
	// minLimit is the fewest requests in flight the limit shrinks to, and where it starts
	// (default 4, or the rule's limit when that is less). At most the rule's limit.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	MinLimit *int64 `json:"minLimit,omitempty"`

	// tolerancePercent is how far above its lowest, in percent of it, the application's
	// average latency to a response's head may be while the limit still grows (default 125:
	// up to a quarter slower than at its best).
	// +optional
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=1000
	TolerancePercent *int64 `json:"tolerancePercent,omitempty"`
}

// Rule is one limit: which requests it counts, how it keys them, and how many it admits.
// +kubebuilder:validation:XValidation:rule="size(self.key) > 0 || (has(self.match) && has(self.match.descriptors)) || has(self.adaptive)",message="key needs at least one part; only a rule that matches descriptors may have key: [] (one counter for every descriptor it matches), or an adaptive rule (one limit per pod)",fieldPath=".key"
// +kubebuilder:validation:XValidation:rule="!has(self.adaptive) || self.algorithm == 'Concurrency'",message="adaptive applies only to algorithm Concurrency: it adapts a pod's limit on the requests in flight",fieldPath=".adaptive"
// +kubebuilder:validation:XValidation:rule="!has(self.adaptive) || size(self.key) == 0",message="an adaptive rule is each pod's own limit on every request it matches in flight to its application: key must be []",fieldPath=".key"
// +kubebuilder:validation:XValidation:rule="!has(self.adaptive) || !has(self.adaptive.minLimit) || self.adaptive.minLimit <= self.limit",message="adaptive.minLimit must not exceed limit, the most requests in flight the adaptive limit grows to",fieldPath=".adaptive.minLimit"
// +kubebuilder:validation:XValidation:rule="self.limit > 0 || self.algorithm != 'Concurrency'",message="limit 0 denies every request: use it with a window algorithm; a Concurrency rule needs at least 1",fieldPath=".limit"
// +kubebuilder:validation:XValidation:rule="self.limit > 0 || (!has(self.burst) && !has(self.leakyBucket) && !has(self.cost) && !has(self.costHeader) && !has(self.lease) && !has(self.countWhen) && !has(self.responseCost))",message="limit 0 denies every request the rule matches: burst, leakyBucket, cost, costHeader, lease, countWhen and responseCost do not apply",fieldPath=".limit"
// +kubebuilder:validation:XValidation:rule="!has(self.burst) || self.algorithm in ['TokenBucket', 'LeakyBucket']",message="burst applies only to TokenBucket and LeakyBucket; the window algorithms admit limit per window",fieldPath=".burst"
// +kubebuilder:validation:XValidation:rule="!has(self.leakyBucket) || self.algorithm == 'LeakyBucket'",message="leakyBucket applies only to algorithm LeakyBucket",fieldPath=".leakyBucket"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'SlidingWindowLog' || self.limit <= 10000",message="limit must be at most 10000 for SlidingWindowLog, which stores one timestamp per admitted request; use SlidingWindowCounter for larger limits",fieldPath=".limit"
// +kubebuilder:validation:XValidation:rule="!has(self.cost) || self.cost <= (has(self.burst) ? self.burst : self.limit)",message="cost must not exceed burst (or limit when burst is unset): such a request could never pass",fieldPath=".cost"
// +kubebuilder:validation:XValidation:rule="(has(self.match) && has(self.match.descriptors)) ? self.key.all(k, has(k.descriptor) && self.match.descriptors.exists(d, d.key == k.descriptor.key)) : self.key.all(k, !has(k.descriptor))",message="a rule that matches descriptors keys only on descriptor entries it matches (key[].descriptor.key among match.descriptors[].key); an HTTP rule cannot key on descriptors",fieldPath=".key"
// +kubebuilder:validation:XValidation:rule="!has(self.match) || !has(self.match.descriptors) || (!has(self.costHeader) && !has(self.match.pathPrefix) && !has(self.match.methods) && !has(self.match.headers))",message="a rule that matches descriptors cannot match or cost on HTTP fields (pathPrefix, methods, headers, costHeader): Envoy sends only descriptors; use hits_addend for the cost",fieldPath=".match"
// +kubebuilder:validation:XValidation:rule="!has(self.match) || !has(self.match.descriptors) || !has(self.leakyBucket) || !has(self.leakyBucket.mode) || self.leakyBucket.mode != 'Queue'",message="a rule that matches descriptors cannot queue: Envoy's rate limit service has no delay; use leakyBucket.mode Meter",fieldPath=".leakyBucket.mode"
// +kubebuilder:validation:XValidation:rule="!has(self.match) || !has(self.match.descriptors) || !has(self.countWhen)",message="a rule that matches descriptors cannot use countWhen: Envoy's rate limit service never sees the response, so it could only charge every hit",fieldPath=".countWhen"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || self.algorithm != 'SlidingWindowLog'",message="lease does not apply to SlidingWindowLog: it promises at most limit in every sliding window, and units spent up to maxAge after they were issued would break that promise (up to twice the limit in one window); use SlidingWindowCounter or TokenBucket",fieldPath=".lease"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || !has(self.leakyBucket) || !has(self.leakyBucket.mode) || self.leakyBucket.mode != 'Queue'",message="lease does not apply to LeakyBucket mode Queue: a queued request's delay is decided from the bucket's level when it arrives, which a unit leased earlier cannot know; use mode Meter",fieldPath=".lease"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || !has(self.lease.maxUnits) || self.lease.maxUnits <= (has(self.burst) ? self.burst : self.limit)",message="lease.maxUnits must not exceed burst (or limit when burst is unset): the shared limit never holds more units at once",fieldPath=".lease.maxUnits"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || (!has(self.calendar) && !has(self.countWhen))",message="lease does not apply with calendar or countWhen: a calendar quota is decided in its store, and countWhen charges after the response, which a unit leased in advance cannot wait for",fieldPath=".lease"
// +kubebuilder:validation:XValidation:rule="self.algorithm == 'Concurrency' || has(self.window) != has(self.calendar)",message="set exactly one of window and calendar"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'Concurrency' || !has(self.window)",message="window does not apply to Concurrency: a request holds its slot from admission until its response ends",fieldPath=".window"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'Concurrency' || !has(self.calendar)",message="calendar does not apply to Concurrency: a request holds its slot from admission until its response ends",fieldPath=".calendar"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'Concurrency' || !has(self.cost)",message="cost does not apply to Concurrency: each request holds one slot",fieldPath=".cost"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'Concurrency' || !has(self.costHeader)",message="costHeader does not apply to Concurrency: each request holds one slot",fieldPath=".costHeader"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'Concurrency' || !has(self.lease)",message="lease does not apply to Concurrency: a slot is held by one request until it ends, not spent in advance",fieldPath=".lease"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'Concurrency' || !has(self.match) || !has(self.match.descriptors)",message="a rule that matches descriptors cannot use algorithm Concurrency: Envoy's rate limit service never sees a request end, so it could never release a slot",fieldPath=".algorithm"
// +kubebuilder:validation:XValidation:rule="!has(self.calendar) || self.algorithm == 'FixedWindow'",message="calendar applies only to algorithm FixedWindow",fieldPath=".calendar"
// +kubebuilder:validation:XValidation:rule="!has(self.countWhen) || self.algorithm in ['FixedWindow', 'TokenBucket']",message="countWhen applies only to FixedWindow and TokenBucket, the algorithms that take a charge after the response",fieldPath=".countWhen"
// +kubebuilder:validation:XValidation:rule="!has(self.responseCost) || self.algorithm in ['FixedWindow', 'TokenBucket']",message="responseCost applies only to FixedWindow (with window or calendar) and TokenBucket, the algorithms that take a charge after the response: SlidingWindowCounter's estimate and SlidingWindowLog's entries must stay within the limit, and a LeakyBucket has already handed out its delays",fieldPath=".responseCost"
// +kubebuilder:validation:XValidation:rule="!has(self.responseCost) || (!has(self.cost) && !has(self.costHeader))",message="responseCost sets the cost (minimumCost up front, the rest from the response): cost and costHeader do not apply",fieldPath=".responseCost"
// +kubebuilder:validation:XValidation:rule="!has(self.responseCost) || !has(self.countWhen)",message="responseCost and countWhen cannot be combined: responseCost charges minimumCost up front whatever the response's status",fieldPath=".responseCost"
// +kubebuilder:validation:XValidation:rule="!has(self.responseCost) || !has(self.lease)",message="lease does not apply with responseCost: leased units are spent in advance, and the cost is known only after the response",fieldPath=".lease"
// +kubebuilder:validation:XValidation:rule="!has(self.match) || !has(self.match.descriptors) || !has(self.responseCost)",message="a rule that matches descriptors cannot use responseCost: Envoy's rate limit service never sees the response",fieldPath=".responseCost"
// +kubebuilder:validation:XValidation:rule="!has(self.responseCost) || !has(self.responseCost.minimumCost) || self.responseCost.minimumCost <= (has(self.burst) ? self.burst : self.limit)",message="responseCost.minimumCost must not exceed burst (or limit when burst is unset): such a request could never pass",fieldPath=".responseCost.minimumCost"
// +kubebuilder:validation:XValidation:rule="!has(self.match) || !has(self.match.descriptors) || (self.key.all(k, !has(k.jwtClaim)) && !has(self.match.jwt))",message="a rule that matches descriptors cannot key on jwtClaim or match on jwt: the RLS server sees Envoy's descriptors, not the request's token; verify it in Envoy (jwt_authn) and send the claim as a descriptor entry",fieldPath=".key"
// +kubebuilder:validation:XValidation:rule="!has(self.tenantLimits) || (has(self.tenantLimits.keyPart) ? self.tenantLimits.keyPart : 0) < size(self.key)",message="tenantLimits.keyPart must be the index of one of the rule's key parts (0 for the first): the tenant is the value of that part",fieldPath=".tenantLimits.keyPart"
type Rule struct {
	// name identifies the rule in metrics, logs and the 429 body; unique within the policy.
	// A DNS label: lower-case letters, digits and '-', at most 63 characters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit"
	Name string `json:"name"`

	// match selects the requests this rule counts; every request when omitted.
	// All given conditions must hold.
	// +optional
	Match *RuleMatch `json:"match,omitempty"`

	// key lists the parts whose values, joined, name the counter a request is charged to,
	// e.g. [{clientIP: {}}] for a limit per client, [{header: {name: X-API-Key}}] per API key.
	// A request lacking a header or query parameter the key needs is charged to one shared
	// "missing" counter. A rule that matches descriptors may set key: [] to count every
	// descriptor it matches in one counter (as envoyproxy/ratelimit's share_threshold).
	// +required
	// +kubebuilder:validation:MaxItems=8
	Key []KeyPart `json:"key"`

	// algorithm is FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket or
	// LeakyBucket, or Concurrency: at most limit requests of a key in flight at once across
	// every pod, each holding a slot from admission until its response ends (no window,
	// calendar, burst, cost, lease or response-based charge; not for descriptor rules).
	// +required
	Algorithm Algorithm `json:"algorithm"`

	// limit is the number of requests (cost units) admitted per window, 0 to 100000000.
	// For TokenBucket and LeakyBucket it is the refill (leak) rate: limit per window; for
	// Concurrency, the requests of a key in flight at once (for an adaptive rule, the most
	// requests in flight each pod's adaptive limit grows to). 0 denies every request the rule
	// matches, with no Retry-After (a block list entry, as envoyproxy/ratelimit's
	// requests_per_unit: 0).
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000000
	Limit int64 `json:"limit"`

	// window is the period limit applies to, a Go duration in whole milliseconds from 1ms to
	// 24h (e.g. 1s, 1m, 1h). Exactly one of window and calendar is set.
	// +optional
	Window Window `json:"window,omitempty"`

	// calendar makes a FixedWindow count per calendar day, ISO week or month of a time zone,
	// each beginning at local midnight (months have their real lengths, DST days 23 or 25
	// hours), instead of per window. Only for FixedWindow; exactly one of window and calendar.
	// +optional
	Calendar *CalendarSpec `json:"calendar,omitempty"`

	// burst is the bucket capacity of TokenBucket and LeakyBucket, 1 to 100000000; limit by
	// default. Only for those two algorithms.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	Burst *int64 `json:"burst,omitempty"`

	// leakyBucket configures algorithm LeakyBucket: Meter (the default) rejects a request
	// that does not fit; Queue delays it so requests leave at the leak rate.
	// +optional
	LeakyBucket *LeakyBucketSpec `json:"leakyBucket,omitempty"`

	// cost is the number of units one request takes, 1 by default; at most burst (or limit).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	Cost *int64 `json:"cost,omitempty"`

	// costHeader names a request header whose positive integer value is the request's cost;
	// requests without a valid value cost `cost`.
	// +optional
	CostHeader HeaderName `json:"costHeader,omitempty"`

	// countWhen counts a request only when its response matches: the request is admitted when
	// the counter has room (a check), and charged after the response only if its status is
	// listed, e.g. {statusCodes: [401, 403]} to count failed logins. Only for FixedWindow and
	// TokenBucket. Concurrent requests of one key can pass the limit by at most their number.
	// +optional
	CountWhen *CountWhen `json:"countWhen,omitempty"`

	// responseCost charges a request what its response reports it cost (tokens, bytes, rows):
	// minimumCost is charged up front, so a key with less left is denied before the call, and
	// the rest when the response ends, taken from a response header or a JSON field of the
	// body (or of the last server-sent event carrying it). The rest may put a TokenBucket in
	// debt, which later requests wait out. A response without a valid value costs
	// minimumCost. Only for FixedWindow and TokenBucket; not with cost, costHeader, countWhen
	// or lease.
	// +optional
	ResponseCost *ResponseCost `json:"responseCost,omitempty"`

	// headers overrides the policy's response.headers for this rule: None hides the rule's
	// numbers (a guard against abuse, beside quotas that clients should see), and a 429 it
	// causes carries only Retry-After; OpenAI reports a rule with responseCost as -tokens,
	// any other as -requests. The policy's style when unset.
	// +optional
	Headers HeaderStyle `json:"headers,omitempty"`

	// mode is Enforce (the default: reject over the limit) or Shadow (count and report in
	// metrics and headers, never reject), for trying a limit on live traffic.
	// +optional
	// +kubebuilder:default=Enforce
	Mode RuleMode `json:"mode,omitempty"`

	// lease lets each sidecar take units of this rule's shared limit from Redis in advance,
	// spend them locally and give back what it has not used when the lease ends: far fewer
	// Redis calls for a hot key, at the price of a stated excess (see docs/leases.md of the
	// repository). Absent: every decision is made in Redis. Not for SlidingWindowLog or
	// LeakyBucket mode Queue.
	// +optional
	Lease *LeaseSpec `json:"lease,omitempty"`

	// adaptive makes a Concurrency rule (with key: []) each pod's own protection of its
	// application: rather than a fixed limit shared through Redis, every sidecar keeps a limit on
	// the requests the rule matches in flight to its application, which grows (up to limit)
	// while the application's average latency stays near its lowest and shrinks (down to
	// adaptive.minLimit) when it rises. A request beyond it is shed with 503 and Retry-After: 1
	// before the other rules are decided, so it charges none of them; in mode Shadow it is
	// only counted. Sidecars only (never a descriptor rule); failureMode does not apply.
	// +optional
	Adaptive *AdaptiveSpec `json:"adaptive,omitempty"`

	// tenantLimits gives the rule another limit (and burst) per tenant: per value of one of its
	// key parts, from a table in a ConfigMap of the policy's namespace, edited without
	// touching the policy (e.g. contract limits of thousands of customers). A tenant not in
	// the table gets the rule's own limit and burst. While the table is missing or has an
	// invalid entry, the last good table stays enforced (TenantLimitsResolved=False says why).
	// docs/policy.md of the repository has the table's format and what a limit changed
	// mid-window does to a key.
	// +optional
	TenantLimits *TenantLimitsSpec `json:"tenantLimits,omitempty"`
}

// TenantLimitsLabel is the label a ConfigMap holding tenant limits carries, with the value
// "true": the controller watches (and reads) only those.
const TenantLimitsLabel = "sluice.dev/tenant-limits"

// LabelEnabled is the value of TenantLimitsLabel and JWKSSecretLabel on the objects the
// controller reads.
const LabelEnabled = "true"

// TenantLimitsSpec names a rule's table of limits per tenant.
type TenantLimitsSpec struct {
	// configMapName names the ConfigMap, in the policy's namespace, that holds the table. It
	// must carry the label sluice.dev/tenant-limits: "true".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be a ConfigMap name: lower-case letters, digits, '-' and '.'"
	ConfigMapName string `json:"configMapName"`

	// key is the ConfigMap's data key that holds the table, CSV with a header row (tenant,limit
	// or tenant,limit,burst) and one row per tenant; the rule's name by default.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="must be a ConfigMap key: letters, digits, '-', '_' and '.'"
	Key string `json:"key,omitempty"`

	// keyPart is the index, in the rule's key, of the part whose value names the tenant: 0
	// (the first part) by default.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=7
	KeyPart *int32 `json:"keyPart,omitempty"`
}

// LeaseSpec configures leased decisions for a rule.
type LeaseSpec struct {
	// maxAge is how long leased units stay usable, 1ms to 10s in whole milliseconds: the
	// bound's A. Over any interval of length T the rule admits at most what the exact rule
	// could admit over T + maxAge.
	// +required
	MaxAge LeaseAge `json:"maxAge"`

	// maxUnits caps one lease, 1 to 100000000, at most burst (or limit); by default the
	// rule's rate times maxAge (at least 1). Each pod holds at most this many units unused.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	MaxUnits *int64 `json:"maxUnits,omitempty"`
}

// CountWhen selects the responses whose requests count.
type CountWhen struct {
	// statusCodes lists the response statuses that count: codes (401) or inclusive ranges
	// ("400-499"), 100 to 599. The controller checks the codes and ranges (a CEL rule on
	// these int-or-string items exceeds the API server's cost budget) and rejects a policy
	// with a malformed one (Accepted=False naming the entry).
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	StatusCodes []intstr.IntOrString `json:"statusCodes"`
}

// ResponseCost says where a response reports what its request cost.
// +kubebuilder:validation:XValidation:rule="has(self.header) != has(self.jsonField)",message="set exactly one of header and jsonField"
type ResponseCost struct {
	// header names a response header whose value, a non-negative integer, is the cost, such
	// as X-Usage-Tokens. The header is passed on to the client.
	// +optional
	Header HeaderName `json:"header,omitempty"`

	// jsonField is the dotted path of object keys to a non-negative integer in the response's
	// JSON body, such as usage.total_tokens; for a text/event-stream response, in the last
	// event whose data is JSON carrying it. The body streams through unbuffered; a JSON body
	// over 4 MiB, or an event over 1 MiB, is not searched.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_$@:-]+([.][A-Za-z0-9_$@:-]+)*$')",message="must be a dotted path of object keys such as usage.total_tokens: letters, digits and _$@:- separated by '.'"
	JSONField string `json:"jsonField,omitempty"`

	// minimumCost, 1 by default, is charged when the request is admitted (a request it does
	// not fit is denied), and is what the request costs when the response reports less or
	// nothing. At most burst (or limit).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	MinimumCost *int64 `json:"minimumCost,omitempty"`
}

// CalendarPeriod is the length of a calendar window.
// +kubebuilder:validation:Enum=Day;Week;Month
type CalendarPeriod string

// The calendar periods.
const (
	Day   CalendarPeriod = "Day"
	Week  CalendarPeriod = "Week"
	Month CalendarPeriod = "Month"
)

// CalendarSpec is a calendar window: a period of a time zone.
type CalendarSpec struct {
	// period is Day, Week (an ISO week, from Monday) or Month.
	// +required
	Period CalendarPeriod `json:"period"`

	// timeZone is the IANA time zone whose local midnight begins each window, such as
	// Europe/Berlin; UTC by default. The controller rejects a zone its time-zone database
	// does not know.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][-A-Za-z0-9_+]*(/[A-Za-z0-9][-A-Za-z0-9_+]*)*$') && self != 'Local'",message="must be an IANA time zone name such as UTC, Europe/Berlin or America/New_York"
	TimeZone string `json:"timeZone,omitempty"`
}

// LeakyBucketSpec configures algorithm LeakyBucket.
// +kubebuilder:validation:XValidation:rule="!has(self.maxDelay) || self.mode == 'Queue'",message="maxDelay applies only to mode Queue",fieldPath=".maxDelay"
type LeakyBucketSpec struct {
	// mode is Meter (the default: admit when the bucket has room, else reject) or Queue
	// (admit when the bucket has room, delaying the request so requests leave at the leak rate).
	// +optional
	// +kubebuilder:default=Meter
	Mode LeakyBucketMode `json:"mode,omitempty"`

	// maxDelay is the longest a Queue request waits, 0s to 24h; a request that would wait
	// longer is rejected. 0s when unset: only requests that need not wait pass.
	// +optional
	MaxDelay *Delay `json:"maxDelay,omitempty"`
}

// RuleMatch selects requests. Every condition given must hold.
type RuleMatch struct {
	// pathPrefix matches request paths that start with it, e.g. /api/.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="must start with '/'"
	PathPrefix string `json:"pathPrefix,omitempty"`

	// methods matches requests with one of these methods; any method when empty.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=9
	Methods []HTTPMethod `json:"methods,omitempty"`

	// headers matches requests whose headers meet each of these conditions: a header with
	// exactly a value, a header that is absent, or a header whose value is none of a list
	// (or that is absent).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Headers []HeaderMatch `json:"headers,omitempty"`

	// descriptors makes this a descriptor rule, decided by the RLS server for spec.domain: it
	// matches an Envoy descriptor whose entries are exactly these, in this order, as a path
	// of envoyproxy/ratelimit's descriptor tree: entry i has key descriptors[i].key and, when
	// value is set, that value (without value, every value matches; key on it to count each
	// value apart). E.g. [{key: generic_key, value: checkout}, {key: remote_address}].
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(d, self.filter(e, e.key == d.key).size() == 1)",message="each descriptor key appears once"
	Descriptors []DescriptorMatch `json:"descriptors,omitempty"`

	// jwt matches requests by their token (spec.jwt): Verified, those whose token verifies;
	// Unverified, those without a token or whose token fails. A rule for anonymous callers
	// (Unverified, keyed by clientIP) beside one per user (Verified, keyed by jwtClaim) gives
	// each its own limit.
	// +optional
	JWT JWTMatch `json:"jwt,omitempty"`
}

// DescriptorMatch is one entry of an Envoy rate limit descriptor.
// +kubebuilder:validation:XValidation:rule="!has(self.notIn) || !has(self.value) || self.value.endsWith('*')",message="notIn applies to an entry without value or with a wildcard value (ending in *): an exact value already excludes every other",fieldPath=".notIn"
type DescriptorMatch struct {
	// key is the entry's key, compared exactly.
	// +required
	Key DescriptorKey `json:"key"`

	// value is the value the entry must have, compared exactly; any value when omitted. A
	// value ending in * matches every value that starts with what precedes the * (foo* matches
	// foo and foobar), as envoyproxy/ratelimit's wildcard values do.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value,omitempty"`

	// notIn excludes values from what the entry matches, on an entry without value (every
	// value but these) or with a wildcard value (its prefix but these); each may end in *, as
	// value may. It leaves the values to a more specific rule, or to none: e.g. a limit per
	// user that exempts admin, [{key: user, notIn: [admin]}], as envoyproxy/ratelimit's
	// `value: admin` entry with `unlimited: true` beside a key-only limit.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	NotIn []string `json:"notIn,omitempty"`
}

// HeaderMatch is a condition on one request header. Exactly one of value, absent and notIn
// is set.
// +kubebuilder:validation:XValidation:rule="[has(self.value), has(self.absent), has(self.notIn)].filter(x, x).size() == 1",message="each header match sets exactly one of value, absent, notIn"
// +kubebuilder:validation:XValidation:rule="!has(self.absent) || self.absent",message="absent: false is no condition; omit the header from match.headers, or set absent: true to match requests without it"
type HeaderMatch struct {
	// name is the header's name; matched case-insensitively.
	// +required
	Name HeaderName `json:"name"`

	// value matches requests that carry the header with exactly this value.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value,omitempty"`

	// absent, when true, matches requests that do not carry the header at all.
	// +optional
	Absent bool `json:"absent,omitempty"`

	// notIn matches requests whose header value is none of these values, and requests that do
	// not carry the header: with the values a gateway sets, it catches every other request,
	// e.g. keys without a known plan.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=1024
	NotIn []string `json:"notIn,omitempty"`
}

// KeyPart is one part of a rule's key. Exactly one source is set.
// +kubebuilder:validation:XValidation:rule="[has(self.clientIP), has(self.header), has(self.path), has(self.method), has(self.query), has(self.descriptor), has(self.jwtClaim)].filter(x, x).size() == 1",message="each key part sets exactly one of clientIP, header, path, method, query, descriptor, jwtClaim"
type KeyPart struct {
	// clientIP keys by the client's address: the TCP peer, or, when the peer is one of
	// trustedProxies, the right-most untrusted address of X-Forwarded-For.
	// +optional
	ClientIP *ClientIPKey `json:"clientIP,omitempty"`

	// header keys by the value of a request header.
	// +optional
	Header *HeaderKey `json:"header,omitempty"`

	// path keys by the request path (without the query).
	// +optional
	Path *PathKey `json:"path,omitempty"`

	// method keys by the request method.
	// +optional
	Method *MethodKey `json:"method,omitempty"`

	// query keys by the value of a query parameter.
	// +optional
	Query *QueryKey `json:"query,omitempty"`

	// descriptor keys by the value of an Envoy descriptor entry, in descriptor rules only; the
	// key must be one of the rule's match.descriptors.
	// +optional
	Descriptor *DescriptorKeyPart `json:"descriptor,omitempty"`

	// jwtClaim keys by a claim of the request's JSON Web Token, once the token is verified
	// as spec.jwt says. A request without a token, or whose token fails verification, is
	// charged to the rule's one shared "unverified" counter, whatever the token claims. HTTP
	// rules only.
	// +optional
	JWTClaim *JWTClaimKey `json:"jwtClaim,omitempty"`
}

// DescriptorKeyPart names a descriptor entry.
type DescriptorKeyPart struct {
	// key is the descriptor entry's key, e.g. remote_address.
	// +required
	Key DescriptorKey `json:"key"`
}

// ClientIPKey keys by client address. It has no fields yet; write {}.
type ClientIPKey struct{}

// PathKey keys by request path. It has no fields yet; write {}.
type PathKey struct{}

// MethodKey keys by request method. It has no fields yet; write {}.
type MethodKey struct{}

// HeaderKey names a request header.
type HeaderKey struct {
	// name is the header's name, matched case-insensitively.
	// +required
	Name HeaderName `json:"name"`
}

// QueryKey names a query parameter.
type QueryKey struct {
	// name is the query parameter's name, matched case-sensitively.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
}

// RateLimitPolicyStatus is what the controller observed and did.
type RateLimitPolicyStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Accepted (the policy is valid and does not conflict with another) and Ready
	// (the policy at observedGeneration is in the namespace's ConfigMap); with tenantLimits,
	// TenantLimitsResolved (every rule's table is read and valid).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// configMap is the name of the ConfigMap in this namespace that holds the rendered policies.
	// +optional
	ConfigMap string `json:"configMap,omitempty"`

	// matchedPods is the number of ready pods the podSelector matches.
	// +optional
	MatchedPods int32 `json:"matchedPods"`

	// uninjectedPods is the number of pods the podSelector matches that are annotated
	// sluice.dev/inject: "true" but run without the sidecar (the injection webhook was
	// unreachable when they were created), so this policy is not enforced on them. Recreate
	// them to inject the sidecar; a Warning event names each one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UninjectedPods int32 `json:"uninjectedPods,omitempty"`

	// summary lists the rules briefly, e.g. "TokenBucket 100/1m, FixedWindow 10/1s".
	// +optional
	Summary string `json:"summary,omitempty"`

	// targets reports each of spec.targetRefs, in its order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Targets []TargetStatus `json:"targets,omitempty"`

	// bypassingServices names the Services of this namespace that select pods of this policy
	// but send (some) traffic to a port other than the sidecar's (targetPort sluice-http), so
	// that traffic is not limited; the SidecarBypassed condition says which port of each.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	BypassingServices []string `json:"bypassingServices,omitempty"`
}

// Condition types and reasons of a RateLimitPolicy.
const (
	ConditionAccepted = "Accepted"
	ConditionReady    = "Ready"
	// ConditionResolvedRefs is True when every target of spec.targetRefs exists (Gateway API's
	// policy status); on each of status.targets, when that target does.
	ConditionResolvedRefs = "ResolvedRefs"
	// ConditionConflicted is True when an older policy defining a rule of the same name for
	// the same pods keeps this one from being enforced.
	ConditionConflicted = "Conflicted"
	// ConditionSidecarBypassed is True when a Service selecting the policy's pods sends
	// traffic past the sidecar (status.bypassingServices).
	ConditionSidecarBypassed = "SidecarBypassed"
	// ConditionTenantLimitsResolved, on a policy with tenantLimits, is True when every rule's
	// table is read and valid, and False naming the rule and why when one is not: that rule
	// keeps its last good table (or, without one, gives every tenant its own limit).
	ConditionTenantLimitsResolved = "TenantLimitsResolved"

	ReasonResolved          = "ResolvedRefs"
	ReasonTargetNotFound    = "TargetNotFound"
	ReasonInvalidKind       = "InvalidKind"
	ReasonUnsupportedTarget = "UnsupportedTarget"
	ReasonNoTarget          = "NoTarget"
	ReasonNoConflict        = "NoConflict"
	ReasonThroughSidecar    = "ThroughSidecar"
	ReasonTargetPortBypass  = "TargetPortBypassesSidecar"

	// ReasonTenantLimitsInvalid: a table's ConfigMap or key is missing, or an entry is not a
	// valid limit for its rule.
	ReasonTenantLimitsInvalid = "InvalidTenantLimits"

	ReasonValid        = "Valid"
	ReasonInvalid      = "Invalid"
	ReasonRuleConflict = "RuleNameConflict"
	// ReasonTooLarge: the namespace's policies do not fit in one ConfigMap even compressed;
	// the oldest that fit are rendered, this one is not.
	ReasonTooLarge     = "TooLarge"
	ReasonRendered     = "Rendered"
	ReasonRenderFailed = "RenderFailed"
	ReasonNotAccepted  = "NotAccepted"
)

// RateLimitPolicy declares rate limits that the Sluice sidecars of the selected pods enforce.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rlp,categories=sluice
// +kubebuilder:metadata:labels="gateway.networking.k8s.io/policy=Direct"
// +kubebuilder:printcolumn:name="Rules",type=string,JSONPath=`.status.summary`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.matchedPods`
// +kubebuilder:printcolumn:name="Domain",type=string,JSONPath=`.spec.domain`,priority=1,description="The Envoy rate limit domain the RLS server serves the policy for"
// +kubebuilder:printcolumn:name="Failure Mode",type=string,JSONPath=`.spec.failureMode`,priority=1,description="What the sidecars do while Redis is unreachable"
// +kubebuilder:printcolumn:name="Bypassed By",type=string,JSONPath=`.status.bypassingServices`,priority=1,description="Services that send traffic to the policy's pods past the sidecar: it is not limited"
// +kubebuilder:printcolumn:name="Uninjected",type=integer,JSONPath=`.status.uninjectedPods`,priority=1,description="Matched pods running without the sidecar: the policy is not enforced on them"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RateLimitPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired rate limiting.
	// +required
	Spec RateLimitPolicySpec `json:"spec"`

	// status is what the controller observed.
	// +optional
	Status RateLimitPolicyStatus `json:"status,omitempty"`
}

// RateLimitPolicyList is a list of RateLimitPolicy.
// +kubebuilder:object:root=true
type RateLimitPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RateLimitPolicy `json:"items"`
}
