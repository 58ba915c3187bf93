package devenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/testutil/envtestassets"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	"github.com/sluice-dev/sluice/internal/upstream"
	"github.com/sluice-dev/sluice/internal/webhook"
)

// SidecarImage is the image name the manager injects; the stand-in kubelet runs the locally
// built sluice-sidecar for it.
const SidecarImage = "sluice.local/sidecar:dev"

// RLSNamespace is the manager's namespace for the RLS renderer: the RLS ConfigMap's. Start
// creates it.
const RLSNamespace = "sluice-system"

// RedisAddr is the address pods reach Redis at, like a Service address: a loopback address of
// its own, so that rewriting a pod's own 127.0.0.1 to its pod address leaves it alone.
const RedisAddr = "127.0.1.1"

// Options configure Start.
type Options struct {
	// Progress receives one line per step; nil discards them.
	Progress func(format string, args ...any)
	// ProcessLog receives the sidecars' output; nil keeps it only in their log files.
	ProcessLog io.Writer
	// Dir is where the system keeps its files; a new temporary directory when empty.
	Dir string
	// RedisTimeout is the sidecars' --redis-timeout (the manager's default when zero).
	RedisTimeout time.Duration
	// MetricsAddr is where the manager serves its metrics (controller-runtime's and the
	// policy metrics, controller.RegisterMetrics), e.g. 127.0.0.1:0; none when empty. The
	// policy metrics go to the process-wide registry: one System per process sets it.
	MetricsAddr string
}

// System is Sluice running on loopback.
type System struct {
	Root, Dir    string
	ControlPlane *ControlPlane
	// Client talks to the API server without a cache.
	Client  client.Client
	Redis   *redisserver.Server
	Kubelet *Kubelet

	opts        Options
	cleanups    *cleanups
	stopManager context.CancelFunc
	managerDone chan error
	mu          sync.Mutex
	pods        []*Pod
}

// Pod is an injected pod running on the stand-in kubelet, with its application.
type Pod struct {
	*RunningPod
	// App counts what the application behind the sidecar served.
	App *upstream.Handler
	// URL is the sidecar's address, http://ip:listen-port.
	URL string
	app *http.Server
}

// Start builds the sidecar, starts the control plane, Redis and the manager (controller and
// webhook) and returns the running system. Stop it, also when a later step fails.
func Start(ctx context.Context, opts Options) (_ *System, err error) {
	if opts.Progress == nil {
		opts.Progress = func(string, ...any) {}
	}
	root, err := Root()
	if err != nil {
		return nil, err
	}
	s := &System{Root: root, Dir: opts.Dir, opts: opts, cleanups: &cleanups{}}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "sluice-devenv-"); err != nil {
			return nil, err
		}
		s.cleanups.add(func() { _ = os.RemoveAll(s.Dir) })
	}

	opts.Progress("Building sluice-sidecar")
	sidecar := filepath.Join(s.Dir, "bin", "sluice-sidecar")
	build := exec.CommandContext(ctx, "go", "build", "-o", sidecar, "./sidecar")
	build.Dir, build.Stderr = root, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("building the sidecar: %w", err)
	}

	opts.Progress("Providing envtest binaries (the first run builds them from source: several minutes)")
	assets, err := envtestassets.Dir()
	if err != nil {
		return nil, err
	}
	opts.Progress("Starting kube-apiserver and etcd")
	if s.ControlPlane, err = StartControlPlane(root, assets, s.Dir); err != nil {
		return nil, err
	}
	s.cleanups.add(func() { _ = s.ControlPlane.Stop() })
	if s.Client, err = client.New(s.ControlPlane.Config, client.Options{Scheme: controller.NewScheme()}); err != nil {
		return nil, err
	}

	opts.Progress("Starting redis-server")
	if s.Redis, err = redisserver.Start(redisserver.WithArgs("--bind", "127.0.0.1", RedisAddr)); err != nil {
		return nil, err
	}
	s.cleanups.add(s.Redis.Close)

	// The manager's namespace, where the RLS renderer writes the RLS server's ConfigMap.
	if err := s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: RLSNamespace}}); err != nil {
		return nil, err
	}
	opts.Progress("Starting the manager (controller and webhook)")
	if err := s.startManager(); err != nil {
		return nil, err
	}
	s.Kubelet = &Kubelet{Client: s.Client, Binaries: map[string]string{SidecarImage: sidecar},
		Dir: filepath.Join(s.Dir, "pods"), Log: opts.ProcessLog}
	return s, nil
}

func (s *System) startManager() error {
	wo := s.ControlPlane.Env.WebhookInstallOptions
	metricsAddr := "0"
	if s.opts.MetricsAddr != "" {
		metricsAddr = s.opts.MetricsAddr
	}
	mgr, err := ctrl.NewManager(s.ControlPlane.Config, ctrl.Options{
		Scheme:                 controller.NewScheme(),
		Cache:                  controller.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: "0",
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: wo.LocalServingHost, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir,
		}),
	})
	if err != nil {
		return err
	}
	if err := controller.Setup(mgr, controller.Options{RenderInterval: controller.DefaultRenderInterval}); err != nil {
		return err
	}
	if err := controller.SetupRateLimitService(mgr, RLSNamespace); err != nil {
		return err
	}
	if s.opts.MetricsAddr != "" {
		if err := controller.RegisterMetrics(mgr); err != nil {
			return err
		}
	}
	cfg := webhook.Config{
		Image:              SidecarImage,
		ImagePullPolicy:    corev1.PullNever,
		RedisURL:           "redis://" + net.JoinHostPort(RedisAddr, strconv.Itoa(s.Redis.Port())) + "/0",
		RedisTimeout:       s.opts.RedisTimeout,
		ExcludedNamespaces: []string{"kube-system"},
	}
	if err := webhook.Setup(mgr, cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopManager, s.managerDone = cancel, make(chan error, 1)
	go func() { s.managerDone <- mgr.Start(ctx) }()
	s.cleanups.add(func() {
		cancel()
		if err := <-s.managerDone; err != nil {
			fmt.Fprintf(os.Stderr, "devenv: manager: %v\n", err)
		}
	})
	// Admission needs the webhook server to be serving.
	started := mgr.GetWebhookServer().StartedChecker()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return started(nil) == nil, nil
	}); err != nil {
		return fmt.Errorf("the webhook server did not start within 30s: %w", err)
	}
	return nil
}

// RunPod creates the pod through the API server (so the webhook injects the sidecar), starts
// its application (an upstream.Handler on the pod's upstream port) and runs its sidecar on the
// stand-in kubelet with ip as the pod's address (use 127.0.2.x).
func (s *System) RunPod(ctx context.Context, pod *corev1.Pod, ip string) (*Pod, error) {
	if err := s.Client.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	if !webhook.HasSidecar(pod) {
		return nil, fmt.Errorf("pod %s was not injected: is it annotated %s: \"true\"?", pod.Name, inject.AnnotationInject)
	}
	appPort := pod.Annotations[inject.AnnotationUpstreamPort]
	if appPort == "" && len(pod.Spec.Containers) > 0 && len(pod.Spec.Containers[0].Ports) > 0 {
		appPort = strconv.Itoa(int(pod.Spec.Containers[0].Ports[0].ContainerPort))
	}
	if appPort == "" {
		return nil, fmt.Errorf("pod %s has no application port", pod.Name)
	}
	app := &upstream.Handler{Name: pod.Name}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, appPort))
	if err != nil {
		return nil, fmt.Errorf("application of %s: %w", pod.Name, err)
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()

	rp, err := s.Kubelet.Run(ctx, pod.Namespace, pod.Name, ip)
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	listen := strconv.Itoa(int(inject.DefaultListenPort))
	if v := pod.Annotations[inject.AnnotationListenPort]; v != "" {
		listen = v
	}
	p := &Pod{RunningPod: rp, App: app, URL: "http://" + net.JoinHostPort(ip, listen), app: srv}
	s.mu.Lock()
	s.pods = append(s.pods, p)
	s.mu.Unlock()
	return p, nil
}

// Stop stops every process the system started, in reverse order, and removes its files.
func (s *System) Stop() {
	s.mu.Lock()
	pods := s.pods
	s.pods = nil
	s.mu.Unlock()
	for _, p := range pods {
		p.Stop()
		_ = p.app.Close()
	}
	s.cleanups.run()
}

// cleanups runs functions in reverse order of registration.
type cleanups struct {
	mu  sync.Mutex
	fns []func()
}

func (c *cleanups) add(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, f)
}

func (c *cleanups) run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// StopRedis stops Redis (SIGTERM), as in an outage.
func (s *System) StopRedis() error { return s.Redis.Stop() }

// KillRedis kills Redis with SIGKILL.
func (s *System) KillRedis() error { return s.Redis.Kill() }

// RestartRedis starts Redis again on the same port, empty.
func (s *System) RestartRedis() error { return s.Redis.Restart() }
