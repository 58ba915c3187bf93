package controller

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// DefaultMetricsAddr is where the manager serves its metrics: HTTPS, as kubebuilder does.
const DefaultMetricsAddr = ":8443"

// The metrics filter asks the API server who a scraper is and whether it may read /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// MetricsOptions is how the manager serves its metrics on addr ("0" disables them). Secure
// (the default) serves HTTPS, with a self-signed certificate unless certDir holds tls.crt and
// tls.key, and lets a request through only when the API server authenticates its bearer token
// (TokenReview) and authorizes it to get the non-resource URL /metrics (SubjectAccessReview):
// the ClusterRole metrics-reader grants that to a Prometheus. HTTP/2 is off (CVE-2023-44487
// and CVE-2023-39325, as kubebuilder). Not secure serves plain HTTP to anyone, for loopback
// development only.
func MetricsOptions(addr string, secure bool, certDir string) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr}
	if secure {
		o.SecureServing = true
		o.CertDir = certDir
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return o
}
