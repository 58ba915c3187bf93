// Package inject is the injection contract: the names the webhook writes into an injected pod
// and the sidecar reads back (its flags and environment variables, the mounts and the files in
// them, its ports), and the annotations a pod uses to ask for the sidecar. The webhook, the
// sidecar's command line and the controller all import these constants, so none of them spells
// a name of its own.
//
// It imports the standard library only, so that every binary can depend on it.
package inject

import (
	"strings"
	"time"
)

// The annotations a pod (in practice, a workload's pod template) uses to ask for the sidecar.
// Only AnnotationInject is needed; the others override one setting for that pod.
const (
	// AnnotationInject: "true" injects the sidecar. Any other value, or none, leaves the pod alone.
	AnnotationInject = "sluice.dev/inject"
	// AnnotationUpstreamPort is the port the application listens on, which the sidecar proxies
	// to on 127.0.0.1. Default: the first port of the first container.
	AnnotationUpstreamPort = "sluice.dev/upstream-port"
	// AnnotationListenPort is the port the sidecar serves on, named PortName. Default
	// DefaultListenPort.
	AnnotationListenPort = "sluice.dev/listen-port"
	// AnnotationMetricsPort is the port of the sidecar's metrics, /healthz and /readyz,
	// named MetricsPortName. Default DefaultMetricsPort.
	AnnotationMetricsPort = "sluice.dev/metrics-port"
	// AnnotationTakeOverPort names a port of the application's containers that the sidecar
	// takes over: the sidecar's port gets that name, the application's port loses it, and
	// the sidecar forwards to its number, so every Service whose targetPort names the port
	// goes through the sidecar with no edit. Probes that name the port keep reaching the
	// application.
	AnnotationTakeOverPort = "sluice.dev/take-over-port"
	// AnnotationImage replaces the manager's sidecar image for this pod.
	AnnotationImage = "sluice.dev/image"
	// AnnotationCPURequest, AnnotationCPULimit, AnnotationMemoryRequest and
	// AnnotationMemoryLimit replace one of the sidecar's resources (a quantity such as 100m or
	// 64Mi); "0" removes it.
	AnnotationCPURequest    = "sluice.dev/cpu-request"
	AnnotationCPULimit      = "sluice.dev/cpu-limit"
	AnnotationMemoryRequest = "sluice.dev/memory-request"
	AnnotationMemoryLimit   = "sluice.dev/memory-limit"
	// AnnotationRedisTimeout bounds each Redis call of the sidecar, a Go duration from 1ms to 10s.
	AnnotationRedisTimeout = "sluice.dev/redis-timeout"
)

// Wants reports whether a pod with these annotations asks for the sidecar.
func Wants(annotations map[string]string) bool { return annotations[AnnotationInject] == "true" }

// The injected container, its ports and its mounts.
const (
	// ContainerName is the sidecar's name. A pod that has a container (or init container) of
	// this name is never changed, which makes injection idempotent.
	ContainerName = "sluice-sidecar"
	// PortName names the sidecar's serving port, for a Service's targetPort.
	PortName = "sluice-http"
	// MetricsPortName names the port of metrics and health endpoints.
	MetricsPortName = "sluice-metrics"
	// DefaultListenPort and DefaultMetricsPort are the ports of PortName and MetricsPortName
	// when the pod's annotations do not say otherwise; the sidecar's own defaults too.
	DefaultListenPort  int32 = 8081
	DefaultMetricsPort int32 = 9090
	// DefaultRLSPort is the RLS server's gRPC port (--grpc-listen).
	DefaultRLSPort int32 = 8081

	// DefaultMaxHeaderBytes, DefaultReadHeaderTimeout and DefaultIdleTimeout are the sidecar's
	// bounds on a client's request head and connections (--max-header-bytes,
	// --read-header-timeout, --idle-timeout), and its proxy server's when they are zero.
	DefaultMaxHeaderBytes                  = 64 << 10
	DefaultReadHeaderTimeout time.Duration = 10 * time.Second
	DefaultIdleTimeout       time.Duration = 120 * time.Second

	// PoliciesVolume and PodInfoVolume are the volumes added to the pod.
	PoliciesVolume = "sluice-policies"
	PodInfoVolume  = "sluice-podinfo"
	// PoliciesDir is where the namespace's rendered policies ConfigMap is mounted; the file in
	// it is named after the ConfigMap's key (policy.DataKey).
	PoliciesDir = "/etc/sluice"
	// PodInfoDir is where the downward API volume is mounted, PodLabelsFile the file in it
	// that holds the pod's labels.
	PodInfoDir    = "/etc/podinfo"
	PodLabelsFile = "labels"
)

// The sidecar's flags. Each can also be set as an environment variable, EnvName(flag).
const (
	FlagListen        = "listen"
	FlagUpstream      = "upstream"
	FlagConfig        = "config"
	FlagPodLabelsFile = "pod-labels-file"
	FlagPodLabels     = "pod-labels"
	// FlagPodName is the pod's name, which ranks it among the ready pods a policy lists for
	// its exact local share; the webhook sets it as EnvName(FlagPodName) from the downward API
	// (PodNameFieldPath).
	FlagPodName      = "pod-name"
	FlagRedisURL     = "redis-url"
	FlagRedisTimeout = "redis-timeout"
	// FlagRedisIdleTimeout closes the sidecar's Redis connections unused for that long, so a
	// quiet pod holds none (a Go duration; 0 never closes them).
	FlagRedisIdleTimeout   = "redis-idle-timeout"
	FlagMetricsListen      = "metrics-listen"
	FlagBreakerThreshold   = "breaker-threshold"
	FlagBreakerCooldown    = "breaker-cooldown"
	FlagBreakerMaxCooldown = "breaker-max-cooldown"
	FlagReloadInterval     = "reload-interval"
	FlagShutdownTimeout    = "shutdown-timeout"
	FlagLocalMaxKeys       = "local-max-keys"
	FlagLogLevel           = "log-level"
	FlagPprof              = "pprof"
	FlagMaxHeaderBytes     = "max-header-bytes"
	FlagReadHeaderTimeout  = "read-header-timeout"
	FlagIdleTimeout        = "idle-timeout"
	// FlagGRPCListen is the RLS server's (cmd/ratelimit) gRPC address; it shares every flag
	// above but those of the proxy (listen, upstream, pod labels, header limits, timeouts).
	FlagGRPCListen = "grpc-listen"
)

// PodNameFieldPath is the downward API field the webhook fills EnvName(FlagPodName) from.
const PodNameFieldPath = "metadata.name"

// EnvPrefix starts the name of every environment variable the sidecar reads.
const EnvPrefix = "SLUICE_"

// EnvRedisPassword carries the Redis password (the webhook fills it from a Secret), so that it
// never appears in the pod spec's arguments; the sidecar uses it as the password of
// --redis-url unless the URL has one.
const EnvRedisPassword = EnvPrefix + "REDIS_PASSWORD" //nolint:gosec // the name of a variable, not a credential

// EnvName is the environment variable that stands in for a sidecar flag: EnvPrefix and the
// flag's name in upper case with '-' as '_' (redis-url: SLUICE_REDIS_URL).
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Arg is a flag and its value as one argument, --flag=value.
func Arg(flag, value string) string { return "--" + flag + "=" + value }
