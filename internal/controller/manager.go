package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// NewScheme returns a scheme with the built-in types and Sluice's API.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(gatewayv1.Install(s))
	return s
}

// CacheOptions limits the manager's cache to what the controller reads: ConfigMaps only when
// they carry ManagedByLabel, Secrets only when they carry v1alpha1.JWKSSecretLabel, so a
// cluster's other ConfigMaps and Secrets are neither listed nor held.
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{ManagedByLabel: ManagedByValue})},
		&corev1.Secret{}:    {Label: labels.SelectorFromSet(labels.Set{v1alpha1.JWKSSecretLabel: v1alpha1.LabelEnabled})},
	}}
}

// DefaultRenderInterval is --render-interval's default: at most one ConfigMap write per
// namespace a second while pods churn.
const DefaultRenderInterval = time.Second

// Options are the controller's settings from the manager's command line.
type Options struct {
	// RenderInterval is the least time between two writes of one namespace's ConfigMap
	// (--render-interval); zero writes on every change.
	RenderInterval time.Duration
}

// Setup registers the controller with a manager, and the cache of the tables of tenant
// limits it reads.
func Setup(mgr ctrl.Manager, o Options) error {
	tables, err := tenantTablesCache(mgr)
	if err != nil {
		return err
	}
	return (&RateLimitPolicyReconciler{
		Client:         mgr.GetClient(),
		Recorder:       mgr.GetEventRecorder("sluice-controller"),
		RenderInterval: o.RenderInterval,
		Tables:         tables,
		APIReader:      mgr.GetAPIReader(),
	}).SetupWithManager(mgr)
}
