// Command manager runs Sluice's controller, which renders RateLimitPolicies into the ConfigMaps
// that injected sidecars read, and the webhook that injects those sidecars.
package main

import (
	"fmt"
	// Calendar rules name IANA time zones; the images are distroless/static, so the binary
	// carries its own copy of the database rather than trust the image to.
	_ "time/tzdata"

	"flag"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/version"
	"github.com/sluice-dev/sluice/internal/webhook"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "--version", "-version":
			fmt.Println(version.String("sluice-manager"))
			return
		case "check":
			if err := runCheck(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "sluice-manager check:", err)
				os.Exit(1)
			}
			return
		}
	}
	var (
		metricsAddr, probeAddr, namespace                string
		leaderElect, webhookEnabled, rotateCerts         bool
		webhookPort                                      int
		certDir, certSecret, webhookService              string
		redisPasswordSecret, redisPasswordKey            string
		cpuRequest, cpuLimit, memoryRequest, memoryLimit string
		cfg                                              webhook.Config
		renderInterval                                   time.Duration
		metricsSecure                                    bool
		metricsCertDir                                   string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", controller.DefaultMetricsAddr, "Address the metrics endpoint binds to; \"0\" disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to callers the API server authenticates and authorizes for GET /metrics (ClusterRole metrics-reader); false serves plain HTTP to anyone.")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "", "Directory holding tls.crt and tls.key for the metrics endpoint; empty uses a self-signed certificate.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The manager's namespace (default $POD_NAMESPACE): never injected; holds the webhook Service and certificate Secret.")

	flag.DurationVar(&renderInterval, "render-interval", controller.DefaultRenderInterval, "Least time between two content changes of one namespace's ConfigMap: changes within it (pod churn) are coalesced and the newest written when it ends; 0 writes each at once.")
	flag.BoolVar(&webhookEnabled, "webhook", true, "Serve the sidecar injection webhook.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port the webhook server listens on.")
	flag.StringVar(&certDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory holding the webhook server's tls.crt and tls.key.")
	flag.BoolVar(&rotateCerts, "webhook-cert-rotation", true, "Provision and rotate the webhook's serving certificate and caBundle; false when cert-manager does.")
	flag.StringVar(&certSecret, "webhook-cert-secret", "sluice-webhook-server-cert", "Secret of the manager's namespace holding the webhook certificate (mounted at --webhook-cert-dir).")
	flag.StringVar(&webhookService, "webhook-service", "sluice-webhook-service", "Service of the manager's namespace in front of the webhook server.")

	flag.StringVar(&cfg.Image, "sidecar-image", "", "Sidecar image to inject (required with --webhook).")
	flag.StringVar((*string)(&cfg.ImagePullPolicy), "sidecar-image-pull-policy", string(corev1.PullIfNotPresent), "Sidecar imagePullPolicy.")
	flag.StringVar(&cfg.RedisURL, "sidecar-redis-url", "", "Redis URL for the sidecars (--"+inject.FlagRedisURL+"), without a password; empty runs them on their in-memory store.")
	flag.BoolVar(&cfg.RedisTLS, "sidecar-redis-tls", false, "Talk TLS to Redis: a redis:// URL is injected as rediss://.")
	flag.StringVar(&redisPasswordSecret, "sidecar-redis-password-secret", "", "Secret, in each injected pod's namespace, holding the Redis password (injected as $"+inject.EnvRedisPassword+").")
	flag.StringVar(&redisPasswordKey, "sidecar-redis-password-key", "password", "Key of --sidecar-redis-password-secret.")
	flag.DurationVar(&cfg.RedisTimeout, "sidecar-redis-timeout", 0, "Bound on each Redis call of the sidecars (--"+inject.FlagRedisTimeout+"); 0 keeps the sidecar's default.")
	flag.DurationVar(&cfg.RedisIdleTimeout, "sidecar-redis-idle-timeout", 0, "How long a sidecar's unused Redis connection stays open (--"+inject.FlagRedisIdleTimeout+"); 0 keeps the sidecar's default.")
	def := webhook.DefaultResources()
	flag.StringVar(&cpuRequest, "sidecar-cpu-request", quantity(def.Requests, corev1.ResourceCPU), "Sidecar CPU request; \"\" for none.")
	flag.StringVar(&cpuLimit, "sidecar-cpu-limit", quantity(def.Limits, corev1.ResourceCPU), "Sidecar CPU limit; \"\" for none.")
	flag.StringVar(&memoryRequest, "sidecar-memory-request", quantity(def.Requests, corev1.ResourceMemory), "Sidecar memory request; \"\" for none.")
	flag.StringVar(&memoryLimit, "sidecar-memory-limit", quantity(def.Limits, corev1.ResourceMemory), "Sidecar memory limit; \"\" for none.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if err := flagContradictions(metricsSecure, metricsCertDir); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")
	fail := func(err error, msg string) {
		log.Error(err, msg)
		os.Exit(1)
	}

	resources, err := parseResources(cpuRequest, cpuLimit, memoryRequest, memoryLimit)
	if err != nil {
		fail(err, "Invalid sidecar resources")
	}
	cfg.Resources = &resources
	if redisPasswordSecret != "" {
		cfg.RedisPasswordSecret = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: redisPasswordSecret}, Key: redisPasswordKey}
	}
	cfg.ExcludedNamespaces = append([]string{namespace}, webhook.ProtectedNamespaces...)
	if webhookEnabled {
		if namespace == "" {
			fail(nil, "--namespace (or $POD_NAMESPACE) is required with --webhook")
		}
		if err := cfg.Validate(); err != nil {
			fail(err, "Invalid sidecar configuration")
		}
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 controller.NewScheme(),
		Cache:                  controller.CacheOptions(),
		Metrics:                controller.MetricsOptions(metricsAddr, metricsSecure, metricsCertDir),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "sluice-manager.sluice.dev",
		// A manager stopped cleanly (a rollout, a scale to 0) gives up the lease, so the next
		// one leads at once instead of a lease duration (15 s) later. Safe: main returns as
		// soon as Start does.
		LeaderElectionReleaseOnCancel: true,
		WebhookServer:                 ctrlwebhook.NewServer(ctrlwebhook.Options{Port: webhookPort, CertDir: certDir}),
	})
	if err != nil {
		fail(err, "Unable to create manager")
	}
	if err := controller.Setup(mgr, controller.Options{RenderInterval: renderInterval}); err != nil {
		fail(err, "Unable to set up controller")
	}
	if namespace != "" {
		if err := controller.SetupRateLimitService(mgr, namespace); err != nil {
			fail(err, "Unable to set up the RLS renderer")
		}
	}
	if err := controller.RegisterMetrics(mgr); err != nil {
		fail(err, "Unable to register the policy metrics")
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		fail(err, "Unable to set up health check")
	}
	readyz := healthz.Ping
	if webhookEnabled {
		var certsReady <-chan struct{}
		if rotateCerts {
			certsReady, err = webhook.AddCertRotator(mgr, webhook.CertOptions{
				Namespace: namespace, SecretName: certSecret, ServiceName: webhookService,
				CertDir: certDir, ConfigurationName: webhook.ConfigurationName,
			})
			if err != nil {
				fail(err, "Unable to set up certificate rotation")
			}
		}
		if readyz, err = webhook.ServeWhenReady(mgr, cfg, certsReady); err != nil {
			fail(err, "Unable to set up the webhook")
		}
	}
	if err := mgr.AddReadyzCheck("readyz", readyz); err != nil {
		fail(err, "Unable to set up ready check")
	}
	log.Info("Starting manager", "version", version.Get(), "namespace", namespace, "webhook", webhookEnabled, "sidecarImage", cfg.Image)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fail(err, "Manager stopped with an error")
	}
}

func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	if q, ok := l[name]; ok {
		return q.String()
	}
	return ""
}

func parseResources(cpuRequest, cpuLimit, memoryRequest, memoryLimit string) (corev1.ResourceRequirements, error) {
	var r corev1.ResourceRequirements
	for _, f := range []struct {
		flag, value string
		list        *corev1.ResourceList
		name        corev1.ResourceName
	}{
		{"sidecar-cpu-request", cpuRequest, &r.Requests, corev1.ResourceCPU},
		{"sidecar-cpu-limit", cpuLimit, &r.Limits, corev1.ResourceCPU},
		{"sidecar-memory-request", memoryRequest, &r.Requests, corev1.ResourceMemory},
		{"sidecar-memory-limit", memoryLimit, &r.Limits, corev1.ResourceMemory},
	} {
		if strings.TrimSpace(f.value) == "" {
			continue
		}
		q, err := resource.ParseQuantity(f.value)
		if err != nil {
			return r, fmt.Errorf("--%s: %w", f.flag, err)
		}
		if *f.list == nil {
			*f.list = corev1.ResourceList{}
		}
		(*f.list)[f.name] = q
	}
	return r, nil
}

// flagContradictions rejects a command line that would not do what it says: a stray argument
// (Go's flag package ignores every flag after it), a metrics certificate for plain HTTP.
func flagContradictions(metricsSecure bool, metricsCertDir string) error {
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: the manager takes flags only, and would ignore every flag after it", flag.Arg(0))
	}
	if !metricsSecure && metricsCertDir != "" {
		return fmt.Errorf("--metrics-cert-dir %q is set with --metrics-secure=false: plain HTTP uses no certificate", metricsCertDir)
	}
	return nil
}
