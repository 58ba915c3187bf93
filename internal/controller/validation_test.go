package controller_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policyfile"
)

// offlineError validates p as `sluicectl render` does and returns its error message.
func offlineError(p *v1alpha1.RateLimitPolicy) string {
	data, err := yaml.Marshal(p)
	Expect(err).NotTo(HaveOccurred())
	_, err = policyfile.Decode(bytes.NewReader(data), "policy.yaml")
	if err == nil {
		return ""
	}
	return err.Error()
}

func burst(n int64) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) { r.Burst = ptr.To(n) })
}

func algorithm(a v1alpha1.Algorithm) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) { r.Algorithm = a })
}

// headerMatch makes the first rule match requests by the header condition h alone.
func headerMatch(h v1alpha1.HeaderMatch) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) { r.Match = &v1alpha1.RuleMatch{Headers: []v1alpha1.HeaderMatch{h}} })
}

func window(w string) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) { r.Window = v1alpha1.Window(w) })
}

// calendar makes the first rule a calendar FixedWindow.
func calendar(period v1alpha1.CalendarPeriod, zone string) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) {
		r.Algorithm, r.Window = v1alpha1.FixedWindow, ""
		r.Calendar = &v1alpha1.CalendarSpec{Period: period, TimeZone: zone}
	})
}

func countWhen(codes ...intstr.IntOrString) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) { r.CountWhen = &v1alpha1.CountWhen{StatusCodes: codes} })
}

// responseCost makes the first rule take its cost from the response's header X-Usage-Tokens
// (jsonField when field is set).
func responseCost(field string, minimum ...int64) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) {
		r.ResponseCost = &v1alpha1.ResponseCost{JSONField: field}
		if field == "" {
			r.ResponseCost.Header = "X-Usage-Tokens"
		}
		if len(minimum) > 0 {
			r.ResponseCost.MinimumCost = ptr.To(minimum[0])
		}
	})
}

// body sets the policy's response body.
func body(b v1alpha1.BodySpec) func(*v1alpha1.RateLimitPolicy) {
	return func(p *v1alpha1.RateLimitPolicy) { p.Spec.Response = &v1alpha1.ResponseSpec{Body: &b} }
}

func queue(maxDelay string) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) {
		r.Algorithm = v1alpha1.LeakyBucket
		r.LeakyBucket = &v1alpha1.LeakyBucketSpec{Mode: v1alpha1.Queue, MaxDelay: ptr.To(v1alpha1.Delay(maxDelay))}
	})
}

// descriptorRule makes the first rule a descriptor rule of domain edge, matching
// [generic_key=checkout, remote_address] and keyed on remote_address; podSelector stays.
func descriptorRule(p *v1alpha1.RateLimitPolicy) {
	p.Spec.Domain = "edge"
	rule0(func(r *v1alpha1.Rule) {
		r.Match = &v1alpha1.RuleMatch{Descriptors: []v1alpha1.DescriptorMatch{{Key: "generic_key", Value: "checkout"}, {Key: "remote_address"}}}
		r.Key = []v1alpha1.KeyPart{{Descriptor: &v1alpha1.DescriptorKeyPart{Key: "remote_address"}}}
	})(p)
}

// domainOnly is descriptorRule without a podSelector: a policy only the RLS server serves.
func domainOnly(p *v1alpha1.RateLimitPolicy) {
	descriptorRule(p)
	p.Spec.PodSelector = nil
}

// tenantLimits gives the first rule a table of tenant limits.
func tenantLimits(t v1alpha1.TenantLimitsSpec) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) { r.TenantLimits = &t })
}

func lease(maxAge string, maxUnits ...int64) func(*v1alpha1.RateLimitPolicy) {
	return rule0(func(r *v1alpha1.Rule) {
		r.Lease = &v1alpha1.LeaseSpec{MaxAge: v1alpha1.LeaseAge(maxAge)}
		if len(maxUnits) > 0 {
			r.Lease.MaxUnits = ptr.To(maxUnits[0])
		}
	})
}

// perUser makes the first rule key on the verified token's sub, its key set fetched from an
// https URL.
func perUser(p *v1alpha1.RateLimitPolicy) {
	p.Spec.JWT = &v1alpha1.JWTSpec{JWKS: v1alpha1.JWKSSource{URL: "https://idp.example.com/.well-known/jwks.json"}}
	rule0(func(r *v1alpha1.Rule) { r.Key = []v1alpha1.KeyPart{{JWTClaim: &v1alpha1.JWTClaimKey{Claim: "sub"}}} })(p)
}

// withJWT changes perUser's spec.jwt.
func withJWT(f func(j *v1alpha1.JWTSpec)) func(*v1alpha1.RateLimitPolicy) {
	return func(p *v1alpha1.RateLimitPolicy) {
		perUser(p)
		f(p.Spec.JWT)
	}
}

var _ = Describe("RateLimitPolicy validation", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	DescribeTable("rejects invalid policies with a message naming the field, as sluicectl render does",
		func(ctx context.Context, mutate func(*v1alpha1.RateLimitPolicy), field, message string) {
			p := newPolicy(ns, "bad", mutate)
			err := k8sClient.Create(ctx, p)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(field + ": "))
			Expect(err.Error()).To(ContainSubstring(message))

			offline := offlineError(newPolicy(ns, "bad", mutate))
			Expect(offline).To(HaveSuffix(err.Error()), "sluicectl render must reject with the API server's message")
		},
		Entry("burst on a window algorithm", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.FixedWindow)(p)
			burst(5)(p)
		}, "spec.rules[0].burst", "burst applies only to TokenBucket and LeakyBucket"),
		Entry("adaptive minLimit above limit", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm, r.Window, r.Key, r.Limit = v1alpha1.Concurrency, "", []v1alpha1.KeyPart{}, 10
			r.Adaptive = &v1alpha1.AdaptiveSpec{MinLimit: ptr.To[int64](50)}
		}), "spec.rules[0].adaptive.minLimit", "adaptive.minLimit must not exceed limit"),
		Entry("adaptive tolerancePercent below 100", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm, r.Window, r.Key = v1alpha1.Concurrency, "", []v1alpha1.KeyPart{}
			r.Adaptive = &v1alpha1.AdaptiveSpec{TolerancePercent: ptr.To[int64](90)}
		}), "spec.rules[0].adaptive.tolerancePercent", "should be greater than or equal to 100"),
		Entry("adaptive on a window algorithm", rule0(func(r *v1alpha1.Rule) {
			r.Key, r.Adaptive = []v1alpha1.KeyPart{}, &v1alpha1.AdaptiveSpec{}
		}), "spec.rules[0].adaptive", "adaptive applies only to algorithm Concurrency"),
		Entry("adaptive with a key", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm, r.Window, r.Adaptive = v1alpha1.Concurrency, "", &v1alpha1.AdaptiveSpec{}
		}), "spec.rules[0].key", "an adaptive rule is each pod's own limit"),
		Entry("empty key without adaptive", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm, r.Window, r.Key = v1alpha1.Concurrency, "", []v1alpha1.KeyPart{}
		}), "spec.rules[0].key", "key needs at least one part"),
		Entry("window on Concurrency", algorithm(v1alpha1.Concurrency),
			"spec.rules[0].window", "window does not apply to Concurrency"),
		Entry("cost on Concurrency", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm, r.Window, r.Cost = v1alpha1.Concurrency, "", ptr.To[int64](1)
		}), "spec.rules[0].cost", "cost does not apply to Concurrency"),
		Entry("burst on Concurrency", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm, r.Window, r.Burst = v1alpha1.Concurrency, "", ptr.To[int64](2)
		}), "spec.rules[0].burst", "burst applies only to TokenBucket and LeakyBucket"),
		Entry("calendar on Concurrency", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm, r.Window, r.Calendar = v1alpha1.Concurrency, "", &v1alpha1.CalendarSpec{Period: v1alpha1.CalendarPeriod("Day")}
		}), "spec.rules[0].calendar", "calendar does not apply to Concurrency"),
		Entry("lease on Concurrency", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm, r.Window, r.Lease = v1alpha1.Concurrency, "", &v1alpha1.LeaseSpec{MaxAge: "1s"}
		}), "spec.rules[0].lease", "lease does not apply to Concurrency"),
		Entry("responseCost on Concurrency", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm, r.Window, r.ResponseCost = v1alpha1.Concurrency, "", &v1alpha1.ResponseCost{Header: "X-Cost"}
		}), "spec.rules[0].responseCost", "responseCost applies only to FixedWindow"),
		Entry("a descriptor rule with Concurrency", func(p *v1alpha1.RateLimitPolicy) {
			descriptorRule(p)
			rule0(func(r *v1alpha1.Rule) { r.Algorithm, r.Window = v1alpha1.Concurrency, "" })(p)
		}, "spec.rules[0].algorithm", "cannot use algorithm Concurrency"),
		Entry("leakyBucket on TokenBucket", rule0(func(r *v1alpha1.Rule) { r.LeakyBucket = &v1alpha1.LeakyBucketSpec{} }),
			"spec.rules[0].leakyBucket", "leakyBucket applies only to algorithm LeakyBucket"),
		Entry("maxDelay in Meter mode", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm = v1alpha1.LeakyBucket
			r.LeakyBucket = &v1alpha1.LeakyBucketSpec{Mode: v1alpha1.Meter, MaxDelay: ptr.To(v1alpha1.Delay("1s"))}
		}), "spec.rules[0].leakyBucket.maxDelay", "maxDelay applies only to mode Queue"),
		Entry("maxDelay over 24h", queue("25h"), "spec.rules[0].leakyBucket.maxDelay", "from 0s to 24h"),
		Entry("SlidingWindowLog over its memory bound", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.SlidingWindowLog)(p)
			rule0(func(r *v1alpha1.Rule) { r.Limit = 10001 })(p)
		}, "spec.rules[0].limit", "limit must be at most 10000 for SlidingWindowLog"),
		Entry("cost above burst", func(p *v1alpha1.RateLimitPolicy) {
			burst(5)(p)
			rule0(func(r *v1alpha1.Rule) { r.Cost = ptr.To[int64](6) })(p)
		}, "spec.rules[0].cost", "cost must not exceed burst"),
		Entry("cost above limit", rule0(func(r *v1alpha1.Rule) { r.Cost = ptr.To[int64](11) }), "spec.rules[0].cost", "cost must not exceed burst (or limit"),
		Entry("fractional window", window("1.5s"), "spec.rules[0].window", "whole milliseconds from 1ms to 24h"),
		Entry("microsecond window", window("1500us"), "spec.rules[0].window", "whole milliseconds"),
		Entry("zero window", window("0s"), "spec.rules[0].window", "from 1ms to 24h"),
		Entry("window over a day", window("25h"), "spec.rules[0].window", "from 1ms to 24h"),
		Entry("window that is no duration", window("soon"), "spec.rules[0].window", "such as 500ms, 1s, 1m or 1h30m"),
		Entry("limit 0 on a Concurrency rule", rule0(func(r *v1alpha1.Rule) {
			r.Algorithm = v1alpha1.Concurrency
			r.Limit = 0
			r.Window = ""
		}), "spec.rules[0].limit", "a Concurrency rule needs at least 1"),
		Entry("limit over the exact bound", rule0(func(r *v1alpha1.Rule) { r.Limit = 100_000_001 }), "spec.rules[0].limit", "less than or equal to 100000000"),
		Entry("burst zero", burst(0), "spec.rules[0].burst", "greater than or equal to 1"),
		Entry("key part with two sources", rule0(func(r *v1alpha1.Rule) {
			r.Key[0].Path = &v1alpha1.PathKey{}
		}), "spec.rules[0].key[0]", "each key part sets exactly one of clientIP, header, path, method, query"),
		Entry("key part with a claim and a header", func(p *v1alpha1.RateLimitPolicy) {
			perUser(p)
			rule0(func(r *v1alpha1.Rule) { r.Key[0].Header = &v1alpha1.HeaderKey{Name: "X-User"} })(p)
		}, "spec.rules[0].key[0]", "each key part sets exactly one of clientIP, header, path, method, query, descriptor, jwtClaim"),
		Entry("a claim key without spec.jwt", func(p *v1alpha1.RateLimitPolicy) {
			perUser(p)
			p.Spec.JWT = nil
		}, "spec.jwt", "a rule that keys on jwtClaim or matches on jwt needs spec.jwt"),
		Entry("a token match without spec.jwt", rule0(func(r *v1alpha1.Rule) { r.Match = &v1alpha1.RuleMatch{JWT: v1alpha1.JWTUnverified} }),
			"spec.jwt", "a rule that keys on jwtClaim or matches on jwt needs spec.jwt"),
		Entry("spec.jwt that no rule reads", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.JWT = &v1alpha1.JWTSpec{JWKS: v1alpha1.JWKSSource{URL: "https://idp.example.com/jwks"}}
		}, "spec.jwt", "jwt applies only to rules that key on jwtClaim or match on jwt"),
		Entry("a key set from a Secret and a URL", withJWT(func(j *v1alpha1.JWTSpec) { j.JWKS.SecretRef = &v1alpha1.JWKSSecretRef{Name: "idp"} }),
			"spec.jwt.jwks", "set exactly one of secretRef and url"),
		Entry("a key set from nowhere", withJWT(func(j *v1alpha1.JWTSpec) { j.JWKS.URL = "" }),
			"spec.jwt.jwks", "set exactly one of secretRef and url"),
		Entry("a key set over plain http", withJWT(func(j *v1alpha1.JWTSpec) { j.JWKS.URL = "http://idp.example.com/jwks" }),
			"spec.jwt.jwks.url", "must be an https URL"),
		Entry("a key set URL that is no URL", withJWT(func(j *v1alpha1.JWTSpec) { j.JWKS.URL = "idp.example.com/jwks" }),
			"spec.jwt.jwks.url", "must be an https URL"),
		Entry("a key set Secret that is no name", withJWT(func(j *v1alpha1.JWTSpec) {
			j.JWKS = v1alpha1.JWKSSource{SecretRef: &v1alpha1.JWKSSecretRef{Name: "IdP_Keys"}}
		}), "spec.jwt.jwks.secretRef.name", "must be a Secret name"),
		Entry("a key set Secret key that is no key", withJWT(func(j *v1alpha1.JWTSpec) {
			j.JWKS = v1alpha1.JWKSSource{SecretRef: &v1alpha1.JWKSSecretRef{Name: "idp", Key: "keys/jwks.json"}}
		}), "spec.jwt.jwks.secretRef.key", "must be a Secret key"),
		Entry("HS256", withJWT(func(j *v1alpha1.JWTSpec) { j.Algorithms = []v1alpha1.JWTAlgorithm{"RS256", "HS256"} }),
			"spec.jwt.algorithms[1]", `Unsupported value: "HS256"`),
		Entry("alg none", withJWT(func(j *v1alpha1.JWTSpec) { j.Algorithms = []v1alpha1.JWTAlgorithm{"none"} }),
			"spec.jwt.algorithms[0]", `Unsupported value: "none"`),
		Entry("an empty audience", withJWT(func(j *v1alpha1.JWTSpec) { j.Audiences = []string{""} }),
			"spec.jwt.audiences[0]", "at least 1 chars long"),
		Entry("a claim path with an empty segment", func(p *v1alpha1.RateLimitPolicy) {
			perUser(p)
			rule0(func(r *v1alpha1.Rule) { r.Key[0].JWTClaim.Claim = "org..id" })(p)
		}, "spec.rules[0].key[0].jwtClaim.claim", "must be a claim name or a dotted path"),
		Entry("a token match that is neither", func(p *v1alpha1.RateLimitPolicy) {
			perUser(p)
			rule0(func(r *v1alpha1.Rule) { r.Match = &v1alpha1.RuleMatch{JWT: "Maybe"} })(p)
		}, "spec.rules[0].match.jwt", `Unsupported value: "Maybe"`),
		Entry("a descriptor rule keyed on a claim", func(p *v1alpha1.RateLimitPolicy) {
			descriptorRule(p)
			perUser(p)
		}, "spec.rules[0].key", "a rule that matches descriptors cannot key on jwtClaim or match on jwt"),
		Entry("a descriptor rule matching on the token", func(p *v1alpha1.RateLimitPolicy) {
			descriptorRule(p)
			p.Spec.JWT = &v1alpha1.JWTSpec{JWKS: v1alpha1.JWKSSource{URL: "https://idp.example.com/jwks"}}
			rule0(func(r *v1alpha1.Rule) { r.Match.JWT = v1alpha1.JWTVerified })(p)
		}, "spec.rules[0].key", "a rule that matches descriptors cannot key on jwtClaim or match on jwt"),
		Entry("key part with no source", rule0(func(r *v1alpha1.Rule) { r.Key[0] = v1alpha1.KeyPart{} }),
			"spec.rules[0].key[0]", "exactly one of"),
		Entry("too many key parts", rule0(func(r *v1alpha1.Rule) {
			for range 8 {
				r.Key = append(r.Key, v1alpha1.KeyPart{Method: &v1alpha1.MethodKey{}})
			}
		}), "spec.rules[0].key", "must have at most 8 items"),
		Entry("key header with a space", rule0(func(r *v1alpha1.Rule) {
			r.Key[0] = v1alpha1.KeyPart{Header: &v1alpha1.HeaderKey{Name: "X Api Key"}}
		}), "spec.rules[0].key[0].header.name", "must be an HTTP header name"),
		Entry("header match with value and absent", headerMatch(v1alpha1.HeaderMatch{Name: "X-Plan", Value: "pro", Absent: true}),
			"spec.rules[0].match.headers[0]", "each header match sets exactly one of value, absent, notIn"),
		Entry("header match with no condition", headerMatch(v1alpha1.HeaderMatch{Name: "X-Plan"}),
			"spec.rules[0].match.headers[0]", "each header match sets exactly one of value, absent, notIn"),
		Entry("header match with notIn and value", headerMatch(v1alpha1.HeaderMatch{Name: "X-Plan", Value: "pro", NotIn: []string{"basic"}}),
			"spec.rules[0].match.headers[0]", "each header match sets exactly one of value, absent, notIn"),
		Entry("header match with an empty notIn", func(p *v1alpha1.RateLimitPolicy) {
			headerMatch(v1alpha1.HeaderMatch{Name: "X-Plan", NotIn: []string{}})(p)
		}, "spec.rules[0].match.headers[0]", "exactly one of value, absent, notIn"),
		Entry("cost header with a colon", rule0(func(r *v1alpha1.Rule) { r.CostHeader = "X-Cost:" }),
			"spec.rules[0].costHeader", "must be an HTTP header name"),
		Entry("trusted proxy that is no CIDR", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.TrustedProxies = []v1alpha1.CIDR{"10.0.0.300/8"}
		}, "spec.trustedProxies[0]", "must be a CIDR such as 10.0.0.0/8"),
		Entry("trusted proxy without a prefix length", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.TrustedProxies = []v1alpha1.CIDR{"198.18.0.1"}
		}, "spec.trustedProxies[0]", "use /32 or /128 for one address"),
		Entry("no rules", func(p *v1alpha1.RateLimitPolicy) { p.Spec.Rules = nil }, "spec.rules", "Required value"),
		Entry("65 rules", func(p *v1alpha1.RateLimitPolicy) {
			for i := range 64 {
				r := p.Spec.Rules[0]
				r.Name = "r" + strings.Repeat("x", i)
				p.Spec.Rules = append(p.Spec.Rules, r)
			}
		}, "spec.rules", "must have at most 64 items"),
		Entry("duplicate rule names", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Rules = append(p.Spec.Rules, p.Spec.Rules[0])
		}, "spec.rules[1]", "Duplicate value"),
		Entry("rule name that is no DNS label", rule0(func(r *v1alpha1.Rule) { r.Name = "Per_Client" }),
			"spec.rules[0].name", "must be a DNS label"),
		Entry("unknown algorithm", algorithm("Magic"), "spec.rules[0].algorithm", "Unsupported value: \"Magic\""),
		Entry("unknown failure mode", func(p *v1alpha1.RateLimitPolicy) { p.Spec.FailureMode = "Sideways" },
			"spec.failureMode", "Unsupported value"),
		Entry("success status code", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Response = &v1alpha1.ResponseSpec{StatusCode: 200}
		}, "spec.response.statusCode", "greater than or equal to 400"),
		Entry("unknown header style", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Response = &v1alpha1.ResponseSpec{Headers: "Fancy"}
		}, "spec.response.headers", "Unsupported value"),
		Entry("path prefix without a slash", rule0(func(r *v1alpha1.Rule) { r.Match = &v1alpha1.RuleMatch{PathPrefix: "api"} }),
			"spec.rules[0].match.pathPrefix", "must start with '/'"),
		Entry("unknown method", rule0(func(r *v1alpha1.Rule) { r.Match = &v1alpha1.RuleMatch{Methods: []v1alpha1.HTTPMethod{"FETCH"}} }),
			"spec.rules[0].match.methods[0]", "Unsupported value"),
		Entry("unknown mode", rule0(func(r *v1alpha1.Rule) { r.Mode = "Maybe" }), "spec.rules[0].mode", "Unsupported value"),
		Entry("neither podSelector nor domain", func(p *v1alpha1.RateLimitPolicy) { p.Spec.PodSelector = nil },
			"spec", "set podSelector or targetRefs (sidecars enforce the policy), domain"),
		Entry("descriptor rule without a domain", func(p *v1alpha1.RateLimitPolicy) {
			descriptorRule(p)
			p.Spec.Domain = ""
		}, "spec.domain", "rules that match descriptors need spec.domain"),
		Entry("HTTP rule without a podSelector", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules = append(p.Spec.Rules, newPolicy("", "").Spec.Rules[0])
			p.Spec.Rules[1].Name = "http"
		}, "spec.podSelector", "without podSelector or targetRefs every rule must match descriptors"),
		Entry("domain with a space", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Domain = "my edge"
		}, "spec.domain", "must be printable ASCII without spaces"),
		Entry("descriptor key part in an HTTP rule", rule0(func(r *v1alpha1.Rule) {
			r.Key = []v1alpha1.KeyPart{{Descriptor: &v1alpha1.DescriptorKeyPart{Key: "remote_address"}}}
		}), "spec.rules[0].key", "an HTTP rule cannot key on descriptors"),
		Entry("descriptor rule keyed on an entry it does not match", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules[0].Key[0].Descriptor.Key = "user"
		}, "spec.rules[0].key", "keys only on descriptor entries it matches"),
		Entry("descriptor rule keyed by client IP", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules[0].Key = append(p.Spec.Rules[0].Key, v1alpha1.KeyPart{ClientIP: &v1alpha1.ClientIPKey{}})
		}, "spec.rules[0].key", "keys only on descriptor entries it matches"),
		Entry("descriptor rule matching a path too", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules[0].Match.PathPrefix = "/api/"
		}, "spec.rules[0].match", "cannot match or cost on HTTP fields"),
		Entry("descriptor rule with a cost header", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules[0].CostHeader = "X-Cost"
		}, "spec.rules[0].match", "use hits_addend for the cost"),
		Entry("limit 0 with a burst", func(p *v1alpha1.RateLimitPolicy) {
			burst(5)(p)
			rule0(func(r *v1alpha1.Rule) { r.Limit = 0 })(p)
		}, "spec.rules[0].limit", "limit 0 denies every request the rule matches"),
		Entry("a negative limit", rule0(func(r *v1alpha1.Rule) { r.Limit = -1 }), "spec.rules[0].limit", "should be greater than or equal to 0"),
		Entry("notIn beside an exact descriptor value", func(p *v1alpha1.RateLimitPolicy) {
			descriptorRule(p)
			p.Spec.Rules[0].Match.Descriptors[0].NotIn = []string{"cart"}
		}, "spec.rules[0].match.descriptors[0].notIn", "notIn applies to an entry without value or with a wildcard value"),
		Entry("an HTTP rule without a key part", rule0(func(r *v1alpha1.Rule) { r.Key = []v1alpha1.KeyPart{} }),
			"spec.rules[0].key", "only a rule that matches descriptors may have key: []"),
		Entry("a descriptor key twice", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules[0].Match.Descriptors[1].Key = "generic_key"
		}, "spec.rules[0].match.descriptors", "each descriptor key appears once"),
		Entry("a descriptor rule that queues", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			queue("1s")(p)
		}, "spec.rules[0].leakyBucket.mode", "cannot queue"),
		Entry("a descriptor rule with countWhen", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			countWhen(intstr.FromInt32(401))(p)
		}, "spec.rules[0].countWhen", "cannot use countWhen"),
		Entry("a descriptor key with a space", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules[0].Match.Descriptors[0].Key = "generic key"
		}, "spec.rules[0].match.descriptors[0].key", "must be printable ASCII without spaces"),
		Entry("lease on SlidingWindowLog", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.SlidingWindowLog)(p)
			lease("100ms")(p)
		}, "spec.rules[0].lease", "lease does not apply to SlidingWindowLog: it promises at most limit in every sliding window"),
		Entry("lease on LeakyBucket Queue", func(p *v1alpha1.RateLimitPolicy) {
			queue("1s")(p)
			lease("100ms")(p)
		}, "spec.rules[0].lease", "lease does not apply to LeakyBucket mode Queue"),
		Entry("lease maxAge 0s", lease("0s"), "spec.rules[0].lease.maxAge", "from 1ms to 10s"),
		Entry("lease maxAge over 10s", lease("11s"), "spec.rules[0].lease.maxAge", "from 1ms to 10s"),
		Entry("lease maxAge in microseconds", lease("1500us"), "spec.rules[0].lease.maxAge", "whole milliseconds"),
		Entry("lease with an empty maxAge", lease(""), "spec.rules[0].lease.maxAge", "must be a duration in whole milliseconds from 1ms to 10s"),
		Entry("lease maxUnits 0", lease("100ms", 0), "spec.rules[0].lease.maxUnits", "greater than or equal to 1"),
		Entry("lease maxUnits above the limit", lease("100ms", 11), "spec.rules[0].lease.maxUnits", "lease.maxUnits must not exceed burst"),
		Entry("lease maxUnits above burst", func(p *v1alpha1.RateLimitPolicy) {
			burst(20)(p)
			lease("100ms", 21)(p)
		}, "spec.rules[0].lease.maxUnits", "lease.maxUnits must not exceed burst"),
		Entry("calendar and window", func(p *v1alpha1.RateLimitPolicy) {
			calendar(v1alpha1.Month, "UTC")(p)
			window("1h")(p)
		}, "spec.rules[0]", "set exactly one of window and calendar"),
		Entry("neither calendar nor window", window(""), "spec.rules[0]", "set exactly one of window and calendar"),
		Entry("lease on a calendar quota", func(p *v1alpha1.RateLimitPolicy) {
			calendar(v1alpha1.Month, "UTC")(p)
			window("")(p)
			lease("100ms")(p)
		}, "spec.rules[0].lease", "lease does not apply with calendar or countWhen"),
		Entry("lease with countWhen", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.FixedWindow)(p)
			countWhen(intstr.FromInt32(401))(p)
			lease("100ms")(p)
		}, "spec.rules[0].lease", "lease does not apply with calendar or countWhen"),
		Entry("calendar on TokenBucket", func(p *v1alpha1.RateLimitPolicy) {
			calendar(v1alpha1.Month, "UTC")(p)
			algorithm(v1alpha1.TokenBucket)(p)
		}, "spec.rules[0].calendar", "calendar applies only to algorithm FixedWindow"),
		Entry("calendar period Year", calendar("Year", "UTC"), "spec.rules[0].calendar.period", "Unsupported value"),
		Entry("calendar zone that is no IANA name", calendar(v1alpha1.Day, "Berlin time"), "spec.rules[0].calendar.timeZone", "must be an IANA time zone name"),
		Entry("countWhen on SlidingWindowCounter", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.SlidingWindowCounter)(p)
			countWhen(intstr.FromInt32(401))(p)
		}, "spec.rules[0].countWhen", "countWhen applies only to FixedWindow and TokenBucket"),
		Entry("countWhen without codes", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Rules[0].CountWhen = &v1alpha1.CountWhen{StatusCodes: []intstr.IntOrString{}}
		}, "spec.rules[0].countWhen.statusCodes", "should have at least 1 items"),
		Entry("calendar zone Local", calendar(v1alpha1.Day, "Local"), "spec.rules[0].calendar.timeZone", "must be an IANA time zone name"),
		Entry("responseCost with header and jsonField", func(p *v1alpha1.RateLimitPolicy) {
			responseCost("usage.total_tokens")(p)
			p.Spec.Rules[0].ResponseCost.Header = "X-Usage-Tokens"
		}, "spec.rules[0].responseCost", "set exactly one of header and jsonField"),
		Entry("responseCost with neither", rule0(func(r *v1alpha1.Rule) { r.ResponseCost = &v1alpha1.ResponseCost{} }),
			"spec.rules[0].responseCost", "set exactly one of header and jsonField"),
		Entry("responseCost jsonField with an empty key", responseCost("usage..total_tokens"),
			"spec.rules[0].responseCost.jsonField", "must be a dotted path of object keys"),
		Entry("responseCost jsonField with a space", responseCost("usage.total tokens"),
			"spec.rules[0].responseCost.jsonField", "must be a dotted path of object keys"),
		Entry("responseCost header that is no header name", rule0(func(r *v1alpha1.Rule) {
			r.ResponseCost = &v1alpha1.ResponseCost{Header: "X Usage"}
		}), "spec.rules[0].responseCost.header", "must be an HTTP header name"),
		Entry("responseCost minimumCost 0", responseCost("", 0), "spec.rules[0].responseCost.minimumCost", "greater than or equal to 1"),
		Entry("responseCost minimumCost above the limit", responseCost("", 11), "spec.rules[0].responseCost.minimumCost", "minimumCost must not exceed burst"),
		Entry("responseCost on SlidingWindowCounter", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.SlidingWindowCounter)(p)
			responseCost("usage.total_tokens")(p)
		}, "spec.rules[0].responseCost", "responseCost applies only to FixedWindow (with window or calendar) and TokenBucket"),
		Entry("responseCost on SlidingWindowLog", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.SlidingWindowLog)(p)
			responseCost("")(p)
		}, "spec.rules[0].responseCost", "responseCost applies only to FixedWindow (with window or calendar) and TokenBucket"),
		Entry("responseCost on LeakyBucket", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.LeakyBucket)(p)
			responseCost("")(p)
		}, "spec.rules[0].responseCost", "a LeakyBucket has already handed out its delays"),
		Entry("responseCost with cost", func(p *v1alpha1.RateLimitPolicy) {
			responseCost("")(p)
			p.Spec.Rules[0].Cost = ptr.To[int64](2)
		}, "spec.rules[0].responseCost", "cost and costHeader do not apply"),
		Entry("responseCost with costHeader", func(p *v1alpha1.RateLimitPolicy) {
			responseCost("")(p)
			p.Spec.Rules[0].CostHeader = "X-Cost"
		}, "spec.rules[0].responseCost", "cost and costHeader do not apply"),
		Entry("responseCost with countWhen", func(p *v1alpha1.RateLimitPolicy) {
			responseCost("")(p)
			countWhen(intstr.FromInt32(200))(p)
		}, "spec.rules[0].responseCost", "responseCost and countWhen cannot be combined"),
		Entry("responseCost with lease", func(p *v1alpha1.RateLimitPolicy) {
			responseCost("")(p)
			lease("100ms")(p)
		}, "spec.rules[0].lease", "lease does not apply with responseCost: leased units are spent in advance"),
		Entry("a descriptor rule with responseCost", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			responseCost("usage.total_tokens")(p)
		}, "spec.rules[0].responseCost", "cannot use responseCost: Envoy's rate limit service never sees the response"),
		Entry("body format Template without a template", body(v1alpha1.BodySpec{Format: v1alpha1.BodyTemplate}),
			"spec.response.body", "template is required with format Template and applies only to it"),
		Entry("a template with format JSON", body(v1alpha1.BodySpec{Format: v1alpha1.BodyJSON, Template: "{{.Message}}"}),
			"spec.response.body", "template is required with format Template and applies only to it"),
		Entry("a contentType with format Text", body(v1alpha1.BodySpec{Format: v1alpha1.BodyText, ContentType: "text/html"}),
			"spec.response.body", "contentType applies only to format Template"),
		Entry("a contentType that is no media type", body(v1alpha1.BodySpec{Format: v1alpha1.BodyTemplate, Template: "x", ContentType: "plain text"}),
			"spec.response.body.contentType", "must be a media type"),
		Entry("podSelector and targetRefs", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.TargetRefs = []v1alpha1.TargetRef{{Kind: "Service", Name: "web"}}
		},
			"spec", "set exactly one of podSelector and targetRefs"),
		Entry("a target of another kind", targets(v1alpha1.TargetRef{Group: "apps", Kind: "Deployment", Name: "web"}),
			"spec.targetRefs[0]", `a target is a Service (group "", kind Service) or an HTTPRoute (group gateway.networking.k8s.io, kind HTTPRoute)`),
		Entry("an HTTPRoute without its group", targets(v1alpha1.TargetRef{Kind: "HTTPRoute", Name: "web"}),
			"spec.targetRefs[0]", "a target is a Service"),
		Entry("a target twice", targets(v1alpha1.TargetRef{Kind: "Service", Name: "web"}, v1alpha1.TargetRef{Kind: "Service", Name: "web"}),
			"spec.targetRefs", "each target appears once"),
		Entry("a sectionName that is no name", targets(v1alpha1.TargetRef{Kind: "Service", Name: "web", SectionName: "HTTP"}),
			"spec.targetRefs[0].sectionName", "must be a port or route rule name"),
		Entry("tenantLimits on a key part the rule does not have", tenantLimits(v1alpha1.TenantLimitsSpec{ConfigMapName: "limits", KeyPart: ptr.To[int32](1)}),
			"spec.rules[0].tenantLimits.keyPart", "tenantLimits.keyPart must be the index of one of the rule's key parts"),
		Entry("tenantLimits on a rule whose key is empty", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			rule0(func(r *v1alpha1.Rule) { r.Key = []v1alpha1.KeyPart{} })(p)
			tenantLimits(v1alpha1.TenantLimitsSpec{ConfigMapName: "limits"})(p)
		}, "spec.rules[0].tenantLimits.keyPart", "one of the rule's key parts (0 for the first)"),
		Entry("tenantLimits naming no ConfigMap", tenantLimits(v1alpha1.TenantLimitsSpec{ConfigMapName: "Limits_1"}),
			"spec.rules[0].tenantLimits.configMapName", "must be a ConfigMap name"),
		Entry("tenantLimits with a key that is no ConfigMap key", tenantLimits(v1alpha1.TenantLimitsSpec{ConfigMapName: "limits", Key: "a/b"}),
			"spec.rules[0].tenantLimits.key", "must be a ConfigMap key"),
	)

	DescribeTable("accepts valid policies, online and offline",
		func(ctx context.Context, mutate func(*v1alpha1.RateLimitPolicy)) {
			Expect(k8sClient.Create(ctx, newPolicy(ns, "good", mutate))).To(Succeed())
			Expect(offlineError(newPolicy(ns, "good", mutate))).To(BeEmpty())
		},
		Entry("the base policy", func(*v1alpha1.RateLimitPolicy) {}),
		Entry("an adaptive rule with its defaults", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Rules = append(p.Spec.Rules, v1alpha1.Rule{Name: "app", Key: []v1alpha1.KeyPart{}, Algorithm: v1alpha1.Concurrency, Limit: 1000, Adaptive: &v1alpha1.AdaptiveSpec{}})
		}),
		Entry("a Shadow adaptive rule with every parameter and a match", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Rules = append(p.Spec.Rules, v1alpha1.Rule{Name: "app", Key: []v1alpha1.KeyPart{}, Algorithm: v1alpha1.Concurrency, Limit: 2000,
				Match: &v1alpha1.RuleMatch{PathPrefix: "/api"}, Mode: v1alpha1.Shadow,
				Adaptive: &v1alpha1.AdaptiveSpec{MinLimit: ptr.To[int64](2000), TolerancePercent: ptr.To[int64](150)}})
		}),
		Entry("a bucket with burst", burst(100_000_000)),
		Entry("LeakyBucket Queue with maxDelay", queue("500ms")),
		Entry("LeakyBucket Queue with maxDelay 0s", queue("0s")),
		Entry("SlidingWindowLog at its bound", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.SlidingWindowLog)(p)
			rule0(func(r *v1alpha1.Rule) { r.Limit = 10000 })(p)
		}),
		Entry("compound windows at the bounds", window("1h30m")),
		Entry("a 1ms window", window("1ms")),
		Entry("a 24h window", window("24h")),
		Entry("cost equal to limit", rule0(func(r *v1alpha1.Rule) { r.Cost = ptr.To[int64](10) })),
		Entry("a domain-only descriptor policy", domainOnly),
		Entry("a domain and a podSelector, a descriptor rule and an HTTP rule", func(p *v1alpha1.RateLimitPolicy) {
			descriptorRule(p)
			p.Spec.Rules = append(p.Spec.Rules, newPolicy("", "").Spec.Rules[0])
			p.Spec.Rules[1].Name = "http"
		}),
		Entry("a descriptor rule on a key alone, shadowed", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules[0].Match.Descriptors = []v1alpha1.DescriptorMatch{{Key: "remote_address"}}
			p.Spec.Rules[0].Mode = v1alpha1.Shadow
		}),
		Entry("limit 0: a blocked key", rule0(func(r *v1alpha1.Rule) { r.Limit = 0 })),
		Entry("a descriptor exemption and a wildcard with exclusions", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules[0].Match.Descriptors = []v1alpha1.DescriptorMatch{{Key: "generic_key", Value: "check*", NotIn: []string{"checkout", "checks*"}},
				{Key: "remote_address", NotIn: []string{"198.18.0.1"}}}
		}),
		Entry("a descriptor rule with one counter (key: [])", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Rules[0].Key = []v1alpha1.KeyPart{}
		}),
		Entry("a TokenBucket lease at its bounds", func(p *v1alpha1.RateLimitPolicy) {
			burst(20)(p)
			lease("10s", 20)(p)
		}),
		Entry("a FixedWindow lease of 1ms", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.FixedWindow)(p)
			lease("1ms")(p)
		}),
		Entry("a SlidingWindowCounter lease", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.SlidingWindowCounter)(p)
			lease("250ms", 10)(p)
		}),
		Entry("a LeakyBucket Meter lease", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.LeakyBucket)(p)
			rule0(func(r *v1alpha1.Rule) { r.LeakyBucket = &v1alpha1.LeakyBucketSpec{Mode: v1alpha1.Meter} })(p)
			lease("1s")(p)
		}),
		Entry("countWhen with codes and a range", countWhen(intstr.FromInt32(401), intstr.FromInt32(403), intstr.FromString("500-599"))),
		Entry("countWhen on a monthly calendar quota", func(p *v1alpha1.RateLimitPolicy) {
			calendar(v1alpha1.Month, "Europe/Berlin")(p)
			countWhen(intstr.FromString("400-499"))(p)
		}),
		Entry("a monthly calendar quota in Europe/Berlin", calendar(v1alpha1.Month, "Europe/Berlin")),
		Entry("responseCost from a header on a TokenBucket", responseCost("")),
		Entry("responseCost from a JSON field, minimumCost at burst", func(p *v1alpha1.RateLimitPolicy) {
			burst(20)(p)
			responseCost("usage.total_tokens", 20)(p)
		}),
		Entry("responseCost on a FixedWindow", func(p *v1alpha1.RateLimitPolicy) {
			algorithm(v1alpha1.FixedWindow)(p)
			responseCost("usageMetadata.totalTokenCount")(p)
		}),
		Entry("responseCost on a monthly calendar quota", func(p *v1alpha1.RateLimitPolicy) {
			calendar(v1alpha1.Month, "Europe/Berlin")(p)
			responseCost("usage.total_tokens", 10)(p)
		}),
		Entry("a weekly calendar quota in the default zone", calendar(v1alpha1.Week, "")),
		Entry("a daily calendar quota in America/Argentina/Buenos_Aires", calendar(v1alpha1.Day, "America/Argentina/Buenos_Aires")),
		Entry("OpenAI headers and body with retry-after-ms, a token rule", func(p *v1alpha1.RateLimitPolicy) {
			responseCost("usage.total_tokens")(p)
			p.Spec.Response = &v1alpha1.ResponseSpec{Headers: v1alpha1.HeadersOpenAI, RetryAfterMs: true,
				Body: &v1alpha1.BodySpec{Format: v1alpha1.BodyOpenAI}}
		}),
		Entry("Draft7 headers, a rule hidden, Unix-time resets", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.Response = &v1alpha1.ResponseSpec{Headers: v1alpha1.HeadersDraft7, LegacyReset: v1alpha1.ResetUnixTime}
			rule0(func(r *v1alpha1.Rule) { r.Headers = v1alpha1.HeadersNone })(p)
		}),
		Entry("a template body", body(v1alpha1.BodySpec{Format: v1alpha1.BodyTemplate, ContentType: "application/problem+json; charset=utf-8",
			Template: `{"status":{{.Status}},"detail":{{json .Message}},"retry_after_ms":{{.RetryAfterMs}}}`})),
		Entry("every key source and match", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.TrustedProxies = []v1alpha1.CIDR{"198.18.0.0/15", "fd00::/8", "203.0.113.7/32"}
			p.Spec.FailureMode = v1alpha1.FailureClosed
			p.Spec.Response = &v1alpha1.ResponseSpec{StatusCode: 503, Headers: v1alpha1.HeadersDraft}
			rule0(func(r *v1alpha1.Rule) {
				r.Key = []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}, {Header: &v1alpha1.HeaderKey{Name: "X-API-Key"}},
					{Path: &v1alpha1.PathKey{}}, {Method: &v1alpha1.MethodKey{}}, {Query: &v1alpha1.QueryKey{Name: "tenant id"}}}
				r.Match = &v1alpha1.RuleMatch{PathPrefix: "/api/", Methods: []v1alpha1.HTTPMethod{"GET", "POST"},
					Headers: []v1alpha1.HeaderMatch{{Name: "X-Tier", Value: "free"}}}
				r.CostHeader = "X-Cost"
				r.Mode = v1alpha1.Shadow
			})(p)
		}),
		Entry("a limit per verified user, keys from a URL", perUser),
		Entry("per verified user and org from a Secret's keys, anonymous callers per client", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.JWT = &v1alpha1.JWTSpec{Header: "X-Id-Token", JWKS: v1alpha1.JWKSSource{SecretRef: &v1alpha1.JWKSSecretRef{Name: "idp.keys"}},
				Algorithms: []v1alpha1.JWTAlgorithm{"RS256", "ES256", "EdDSA"}, Issuer: "https://idp.example.com", Audiences: []string{"api", "web"}}
			rule0(func(r *v1alpha1.Rule) {
				r.Key = []v1alpha1.KeyPart{{JWTClaim: &v1alpha1.JWTClaimKey{Claim: "org.id"}}, {JWTClaim: &v1alpha1.JWTClaimKey{Claim: "https://example.com/user"}}}
				r.Match = &v1alpha1.RuleMatch{JWT: v1alpha1.JWTVerified}
			})(p)
			p.Spec.Rules = append(p.Spec.Rules, v1alpha1.Rule{Name: "anonymous", Match: &v1alpha1.RuleMatch{JWT: v1alpha1.JWTUnverified},
				Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}}, Algorithm: v1alpha1.FixedWindow, Limit: 10, Window: "1m"})
		}),
		Entry("tenant limits on the second key part, a named key", func(p *v1alpha1.RateLimitPolicy) {
			rule0(func(r *v1alpha1.Rule) {
				r.Key = append(r.Key, v1alpha1.KeyPart{Header: &v1alpha1.HeaderKey{Name: "X-Tenant"}})
			})(p)
			tenantLimits(v1alpha1.TenantLimitsSpec{ConfigMapName: "tenant-limits.v2", Key: "limits.csv", KeyPart: ptr.To[int32](1)})(p)
		}),
		Entry("tenant limits of a descriptor rule", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			tenantLimits(v1alpha1.TenantLimitsSpec{ConfigMapName: "limits"})(p)
		}),
		Entry("a Service target", targets(v1alpha1.TargetRef{Kind: "Service", Name: "web", SectionName: "http"})),
		Entry("HTTPRoute targets, one a rule of a route", targets(
			v1alpha1.TargetRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: "web"},
			v1alpha1.TargetRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: "web", SectionName: "api"})),
	)

	It("defaults a calendar's zone to UTC and renders it; refuses a zone the database does not know", func(ctx context.Context) {
		p := newPolicy(ns, "monthly", calendar(v1alpha1.Month, ""))
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		Expect(p.Spec.Rules[0].Calendar.TimeZone).To(Equal("UTC"))
		Eventually(func(g Gomega) {
			_, doc := rendered(g, ctx, ns)
			g.Expect(doc.Policies).To(HaveLen(1))
			g.Expect(doc.Policies[0].Rules[0].Calendar).To(Equal(&policy.Calendar{Period: "Month", TimeZone: "UTC"}))
		}).Should(Succeed())

		Expect(k8sClient.Create(ctx, newPolicy(ns, "bad-range", countWhen(intstr.FromString("499-400")),
			rule0(func(r *v1alpha1.Rule) { r.Name = "failures" })))).To(Succeed())
		Eventually(func(g Gomega) {
			_, accepted, _ := status(g, ctx, ns, "bad-range")
			g.Expect(accepted.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(accepted.Message).To(ContainSubstring(`countWhen.statusCodes[0]: 499-400 is not a status code from 100 to 599`))
		}).Should(Succeed())

		Expect(k8sClient.Create(ctx, newPolicy(ns, "bad-template", body(v1alpha1.BodySpec{Format: v1alpha1.BodyTemplate, Template: "{{.Retry}}"}),
			rule0(func(r *v1alpha1.Rule) { r.Name = "templated" })))).To(Succeed())
		Eventually(func(g Gomega) {
			_, accepted, _ := status(g, ctx, ns, "bad-template")
			g.Expect(accepted.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(accepted.Message).To(ContainSubstring(`response.body.template: `))
			g.Expect(accepted.Message).To(ContainSubstring(`can't evaluate field Retry`))
		}).Should(Succeed())

		Expect(k8sClient.Create(ctx, newPolicy(ns, "nowhere", calendar(v1alpha1.Day, "Europe/Nowhere"),
			rule0(func(r *v1alpha1.Rule) { r.Name = "daily" })))).To(Succeed())
		Eventually(func(g Gomega) {
			_, accepted, _ := status(g, ctx, ns, "nowhere")
			g.Expect(accepted.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(accepted.Reason).To(Equal(v1alpha1.ReasonInvalid))
			g.Expect(accepted.Message).To(ContainSubstring(`calendar.timeZone: time zone "Europe/Nowhere" is not an IANA time zone`))
		}).Should(Succeed())
	})

	It("accepts every policy `sluicectl convert envoy-ratelimit` makes of envoyproxy/ratelimit's examples", func(ctx context.Context) {
		names, err := filepath.Glob(filepath.Join("..", "convert", "testdata", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(names).NotTo(BeEmpty())
		converted := 0
		for _, name := range names {
			b, err := os.ReadFile(name)
			Expect(err).NotTo(HaveOccurred())
			res, err := convert.EnvoyRatelimit([]convert.File{{Name: name, Content: b}}, convert.Options{Namespace: ns})
			if err != nil {
				Expect(err.Error()).To(ContainSubstring("replaces: not supported"), name)
				continue
			}
			for i := range res.Policies {
				Expect(offlineError(&res.Policies[i])).To(BeEmpty(), name)
				Expect(k8sClient.Create(ctx, &res.Policies[i])).To(Succeed(), name)
				converted++
			}
		}
		Expect(converted).To(Equal(len(names) - 1))
	})

	It("applies defaults", func(ctx context.Context) {
		p := newPolicy(ns, "defaults", queue("1s"), rule0(func(r *v1alpha1.Rule) { r.LeakyBucket.Mode = "" }))
		p.Spec.Rules[0].LeakyBucket.MaxDelay = nil
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		Expect(p.Spec.FailureMode).To(Equal(v1alpha1.FailureLocal))
		Expect(p.Spec.Response).To(Equal(&v1alpha1.ResponseSpec{StatusCode: 429, Headers: v1alpha1.HeadersBoth, LegacyReset: v1alpha1.ResetSeconds}))
		Expect(p.Spec.Rules[0].Mode).To(Equal(v1alpha1.Enforce))
		Expect(p.Spec.Rules[0].LeakyBucket.Mode).To(Equal(v1alpha1.Meter))
	})
})
