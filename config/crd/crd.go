// Package crd embeds the generated CustomResourceDefinitions, so that programs such as
// `sluicectl render` validate policies against exactly the schema the API server enforces.
package crd

import _ "embed"

// RateLimitPolicies is the RateLimitPolicy CustomResourceDefinition (YAML).
//
//go:embed bases/sluice.dev_ratelimitpolicies.yaml
var RateLimitPolicies []byte
