package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// CertOptions locate the serving certificate the manager provisions for itself.
type CertOptions struct {
	// Namespace is the manager's namespace, which holds SecretName and ServiceName.
	Namespace string
	// SecretName is the Secret the CA and serving certificate are kept in. It must exist (the
	// manifests ship it empty) and be mounted at CertDir.
	SecretName string
	// ServiceName is the webhook Service; the certificate is for <service>.<namespace>.svc.
	ServiceName string
	// CertDir is where the webhook server reads tls.crt and tls.key.
	CertDir string
	// ConfigurationName is the MutatingWebhookConfiguration whose caBundle is kept current.
	ConfigurationName string
}

// The rotator reads Secrets of the manager's namespace and every MutatingWebhookConfiguration
// through its own informers, and writes only the two objects it owns.
//
// +kubebuilder:rbac:groups="",namespace=sluice-system,resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=sluice-system,resources=secrets,resourceNames=sluice-webhook-server-cert,verbs=update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,resourceNames=sluice-mutating-webhook-configuration,verbs=update

// AddCertRotator makes the manager provision and rotate its own serving certificate, with
// open-policy-agent/cert-controller: a self-signed CA (10 years) and a serving certificate
// (1 year, renewed 90 days before it expires) kept in the Secret, and the CA written into the
// webhook configuration's caBundle. Every replica runs it, since every replica serves the
// webhook. The returned channel is closed once the certificate is mounted and the caBundle
// set, when the webhook may be served.
func AddCertRotator(mgr ctrl.Manager, o CertOptions) (<-chan struct{}, error) {
	if o.Namespace == "" || o.SecretName == "" || o.ServiceName == "" || o.ConfigurationName == "" {
		return nil, errors.New("certificate rotation needs a namespace, a Secret, a Service and a webhook configuration name")
	}
	ready := make(chan struct{})
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName},
		CertDir:        o.CertDir,
		CAName:         "sluice-ca",
		CAOrganization: "sluice",
		DNSName:        fmt.Sprintf("%s.%s.svc", o.ServiceName, o.Namespace),
		ExtraDNSNames:  []string{fmt.Sprintf("%s.%s.svc.cluster.local", o.ServiceName, o.Namespace)},
		IsReady:        ready,
		Webhooks:       []rotator.WebhookInfo{{Name: o.ConfigurationName, Type: rotator.Mutating}},
		// Each replica keeps its own files current; none needs the leader.
		RequireLeaderElection: false,
		EnableReadinessCheck:  true,
		FieldOwner:            "sluice-manager",
	})
	if err != nil {
		return nil, err
	}
	return ready, nil
}

// ServeWhenReady serves the injector once ready is closed (immediately when ready is nil), and
// returns a readiness check that fails until the webhook server has started: a replica joins
// the webhook Service only when it can answer.
func ServeWhenReady(mgr ctrl.Manager, config Config, ready <-chan struct{}) (healthz.Checker, error) {
	if err := config.Validate(); err != nil {
		return nil, err
	}
	var started atomic.Pointer[healthz.Checker]
	serve := func() error {
		if err := Setup(mgr, config); err != nil {
			return err
		}
		check := mgr.GetWebhookServer().StartedChecker()
		started.Store(&check)
		return nil
	}
	if ready == nil {
		if err := serve(); err != nil {
			return nil, err
		}
	} else {
		go func() {
			<-ready
			if err := serve(); err != nil {
				ctrl.Log.WithName("webhook").Error(err, "Unable to serve the injector")
			}
		}()
	}
	return func(req *http.Request) error {
		check := started.Load()
		if check == nil {
			return errors.New("webhook certificate not ready yet")
		}
		return (*check)(req)
	}, nil
}
