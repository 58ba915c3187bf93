// Package webhook injects the Sluice sidecar into pods that ask for it: a mutating admission
// webhook served by the manager, and the certificate rotation that lets the API server trust it.
package webhook

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/limiter/redisurl"
	"github.com/sluice-dev/sluice/internal/policy"
)

// UID is the user and group the sidecar runs as: distroless's "nonroot".
const UID int64 = 65532

// DefaultResources are the sidecar's resources when neither the manager nor the pod says
// otherwise: a request that lets a small proxy schedule anywhere, a memory limit above the
// in-memory limiter's key bound, and no CPU limit, because throttling a proxy on the request
// path adds its latency to every request of the application.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
	}
}

// Config is what the manager injects. The zero value is not usable: Image is required.
// A Config is read-only once in use and then safe for concurrent use.
type Config struct {
	// Image is the sidecar image.
	Image string
	// ImagePullPolicy of the sidecar; IfNotPresent when empty.
	ImagePullPolicy corev1.PullPolicy
	// RedisURL is passed as --redis-url; empty runs the sidecars on their in-memory store.
	// It should not hold a password: use RedisPasswordSecret.
	RedisURL string
	// RedisTLS makes the sidecars talk TLS to Redis: a redis:// URL becomes rediss://.
	RedisTLS bool
	// RedisPasswordSecret names a Secret key holding the Redis password. The Secret must exist
	// in the namespace of every injected pod: a pod cannot reference another namespace's Secret.
	RedisPasswordSecret *corev1.SecretKeySelector
	// RedisTimeout is passed as --redis-timeout when not zero.
	RedisTimeout time.Duration
	// RedisIdleTimeout is passed as --redis-idle-timeout when not zero.
	RedisIdleTimeout time.Duration
	// Resources of the sidecar; DefaultResources when nil.
	Resources *corev1.ResourceRequirements
	// ExcludedNamespaces are never mutated, even if the webhook configuration's
	// namespaceSelector was lost: the manager's own namespace belongs here.
	ExcludedNamespaces []string
}

// Validate reports a configuration the webhook cannot inject with.
func (c *Config) Validate() error {
	var errs []error
	if err := validImage(c.Image); err != nil {
		errs = append(errs, fmt.Errorf("sidecar image: %w", err))
	}
	if c.RedisURL != "" {
		if _, err := c.redisURL(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.RedisPasswordSecret != nil && (c.RedisPasswordSecret.Name == "" || c.RedisPasswordSecret.Key == "") {
		errs = append(errs, errors.New("redis password secret: both a Secret name and a key are needed"))
	}
	if c.Resources != nil {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[name]
			lim, hasLim := c.Resources.Limits[name]
			if hasReq && hasLim && req.Cmp(lim) > 0 {
				errs = append(errs, fmt.Errorf("sidecar resources: the %s request %s exceeds the limit %s", name, req.String(), lim.String()))
			}
		}
	}
	if c.RedisTimeout != 0 {
		if err := validTimeout(c.RedisTimeout); err != nil {
			errs = append(errs, fmt.Errorf("redis timeout: %w", err))
		}
	}
	if c.RedisIdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("redis idle timeout: %s is negative", c.RedisIdleTimeout))
	}
	return errors.Join(errs...)
}

// redisURL returns RedisURL with the scheme RedisTLS asks for.
func (c *Config) redisURL() (string, error) {
	u, err := url.Parse(c.RedisURL)
	if err != nil {
		return "", errors.New("redis URL does not parse") // the URL may hold a password: do not echo it
	}
	scheme, err := redisurl.ParseScheme(u.Scheme)
	if err != nil {
		return "", err
	}
	if c.RedisTLS && !scheme.TLS {
		scheme.TLS = true
		u.Scheme = scheme.String()
	}
	return u.String(), nil
}

// Wants reports whether a pod asks for the sidecar.
func Wants(pod *corev1.Pod) bool { return inject.Wants(pod.Annotations) }

// HasSidecar reports whether a pod has a container or init container named inject.ContainerName.
func HasSidecar(pod *corev1.Pod) bool {
	named := func(c corev1.Container) bool { return c.Name == inject.ContainerName }
	return slices.ContainsFunc(pod.Spec.InitContainers, named) || slices.ContainsFunc(pod.Spec.Containers, named)
}

// Mutate injects the sidecar into pod when it asks for it and does not have it yet. It returns
// whether it changed the pod, and an error naming the annotation when an annotation's value
// is unusable; the pod is unchanged then.
func (c *Config) Mutate(pod *corev1.Pod) (bool, error) {
	if !Wants(pod) || HasSidecar(pod) {
		return false, nil
	}
	o, err := c.options(pod)
	if err != nil {
		return false, err
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == inject.PoliciesVolume || v.Name == inject.PodInfoVolume {
			return false, fmt.Errorf("%s: the pod already has a volume named %q, which the sidecar needs", inject.AnnotationInject, v.Name)
		}
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, volumes()...)
	if o.takeOver != "" {
		takeOver(pod, o.takeOver, o.upstreamPort)
	}
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, c.container(o))
	return true, nil
}

// takeOver removes the name from the application's port named name (number), so that the
// sidecar's port can carry it, and points the application's probes and lifecycle hooks that
// name it at the number: a Service that targets the port by name reaches the sidecar, and the
// kubelet still probes the application.
func takeOver(pod *corev1.Pod, name string, number int32) {
	byNumber := func(p *intstr.IntOrString) {
		if p.Type == intstr.String && p.StrVal == name {
			*p = intstr.FromInt32(number)
		}
	}
	handler := func(h *corev1.ProbeHandler) {
		if h.HTTPGet != nil {
			byNumber(&h.HTTPGet.Port)
		}
		if h.TCPSocket != nil {
			byNumber(&h.TCPSocket.Port)
		}
	}
	for i := range pod.Spec.Containers {
		ctr := &pod.Spec.Containers[i]
		owns := false
		for j := range ctr.Ports {
			if ctr.Ports[j].Name == name {
				ctr.Ports[j].Name, owns = "", true
			}
		}
		if !owns {
			continue
		}
		for _, pr := range []*corev1.Probe{ctr.LivenessProbe, ctr.ReadinessProbe, ctr.StartupProbe} {
			if pr != nil {
				handler(&pr.ProbeHandler)
			}
		}
		if l := ctr.Lifecycle; l != nil {
			for _, h := range []*corev1.LifecycleHandler{l.PostStart, l.PreStop} {
				if h != nil && h.HTTPGet != nil {
					byNumber(&h.HTTPGet.Port)
				}
				if h != nil && h.TCPSocket != nil {
					byNumber(&h.TCPSocket.Port)
				}
			}
		}
	}
}

// namedPort finds the application's container port called name.
func namedPort(pod *corev1.Pod, name string) (corev1.ContainerPort, bool) {
	for _, ctr := range pod.Spec.Containers {
		for _, p := range ctr.Ports {
			if p.Name == name {
				return p, true
			}
		}
	}
	return corev1.ContainerPort{}, false
}

// options are one pod's settings: the manager's, overridden by the pod's annotations.
type options struct {
	image                             string
	upstreamPort, listenPort, metrics int32
	// takeOver is the name of the application's port the sidecar's port takes; empty keeps
	// inject.PortName.
	takeOver     string
	resources    corev1.ResourceRequirements
	redisTimeout time.Duration
}

func (c *Config) options(pod *corev1.Pod) (options, error) {
	a := pod.Annotations
	o := options{image: c.Image, listenPort: inject.DefaultListenPort, metrics: inject.DefaultMetricsPort, redisTimeout: c.RedisTimeout}
	if c.Resources != nil {
		o.resources = *c.Resources.DeepCopy()
	} else {
		o.resources = DefaultResources()
	}

	var errs []error
	fail := func(annotation, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %q %s", annotation, a[annotation], fmt.Sprintf(format, args...)))
	}
	port := func(annotation string, into *int32) {
		v, ok := a[annotation]
		if !ok {
			return
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 || n > 65535 {
			fail(annotation, "is not a port number from 1 to 65535")
			return
		}
		*into = int32(n)
	}
	port(inject.AnnotationListenPort, &o.listenPort)
	port(inject.AnnotationMetricsPort, &o.metrics)
	if _, ok := a[inject.AnnotationUpstreamPort]; ok {
		port(inject.AnnotationUpstreamPort, &o.upstreamPort)
	} else if _, ok := a[inject.AnnotationTakeOverPort]; ok {
		// the port taken over is the upstream (below)
	} else if len(pod.Spec.Containers) > 0 && len(pod.Spec.Containers[0].Ports) > 0 {
		o.upstreamPort = pod.Spec.Containers[0].Ports[0].ContainerPort
	} else {
		errs = append(errs, fmt.Errorf("%s: not set, and the first container declares no port to default to; set it to the port the application listens on", inject.AnnotationUpstreamPort))
	}
	if name, ok := a[inject.AnnotationTakeOverPort]; ok {
		p, found := namedPort(pod, name)
		_, upstreamSet := a[inject.AnnotationUpstreamPort]
		switch {
		case name == inject.PortName || name == inject.MetricsPortName:
			fail(inject.AnnotationTakeOverPort, "is the sidecar's own port; name the application's port")
		case !found:
			fail(inject.AnnotationTakeOverPort, "names no port of the pod's containers; name the application's port (ports[].name) that its Services target")
		case upstreamSet && o.upstreamPort != p.ContainerPort:
			fail(inject.AnnotationTakeOverPort, "is port %d, but %s says %d; omit %s", p.ContainerPort, inject.AnnotationUpstreamPort, o.upstreamPort, inject.AnnotationUpstreamPort)
		default:
			o.upstreamPort, o.takeOver = p.ContainerPort, name
		}
	}

	if v, ok := a[inject.AnnotationImage]; ok {
		if err := validImage(v); err != nil {
			fail(inject.AnnotationImage, "%v", err)
		} else {
			o.image = v
		}
	}
	errs = append(errs, parseResources(a, &o.resources)...)
	if v, ok := a[inject.AnnotationRedisTimeout]; ok {
		d, err := time.ParseDuration(v)
		if err == nil {
			err = validTimeout(d)
		}
		if err != nil {
			fail(inject.AnnotationRedisTimeout, "is not a duration from 1ms to 10s, such as 50ms")
		} else {
			o.redisTimeout = d
		}
	}
	if len(errs) > 0 {
		return options{}, errors.Join(errs...)
	}

	// The sidecar shares the pod's network namespace: its ports must be free there.
	if o.listenPort == o.upstreamPort {
		return options{}, fmt.Errorf("%s: %d is also the upstream port (%s); the sidecar must listen on another port", inject.AnnotationListenPort, o.listenPort, inject.AnnotationUpstreamPort)
	}
	if o.listenPort == o.metrics {
		return options{}, fmt.Errorf("%s: %d is also the listen port (%s)", inject.AnnotationMetricsPort, o.metrics, inject.AnnotationListenPort)
	}
	for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for _, p := range ctr.Ports {
			if p.ContainerPort == o.listenPort {
				return options{}, fmt.Errorf("%s: port %d is taken by container %q; choose another port for the sidecar", inject.AnnotationListenPort, o.listenPort, ctr.Name)
			}
			if p.ContainerPort == o.metrics {
				return options{}, fmt.Errorf("%s: port %d is taken by container %q; choose another port for the sidecar's metrics", inject.AnnotationMetricsPort, o.metrics, ctr.Name)
			}
		}
	}
	return o, nil
}

// parseResources applies the resource annotations to r.
func parseResources(a map[string]string, r *corev1.ResourceRequirements) []error {
	var errs []error
	for _, q := range []struct {
		annotation string
		list       *corev1.ResourceList
		name       corev1.ResourceName
	}{
		{inject.AnnotationCPURequest, &r.Requests, corev1.ResourceCPU},
		{inject.AnnotationCPULimit, &r.Limits, corev1.ResourceCPU},
		{inject.AnnotationMemoryRequest, &r.Requests, corev1.ResourceMemory},
		{inject.AnnotationMemoryLimit, &r.Limits, corev1.ResourceMemory},
	} {
		v, ok := a[q.annotation]
		if !ok {
			continue
		}
		quantity, err := resource.ParseQuantity(v)
		if err != nil || quantity.Sign() < 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a non-negative quantity such as 100m, 0.5, 64Mi or 1Gi", q.annotation, v))
			continue
		}
		if quantity.IsZero() {
			delete(*q.list, q.name)
			continue
		}
		if *q.list == nil {
			*q.list = corev1.ResourceList{}
		}
		(*q.list)[q.name] = quantity
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := r.Requests[name]
		lim, hasLim := r.Limits[name]
		if hasReq && hasLim && req.Cmp(lim) > 0 {
			errs = append(errs, fmt.Errorf("%s: the sidecar's %s request %s exceeds its limit %s", annotationsOf(name), name, req.String(), lim.String()))
		}
	}
	return errs
}

func annotationsOf(name corev1.ResourceName) string {
	if name == corev1.ResourceCPU {
		return inject.AnnotationCPURequest + ", " + inject.AnnotationCPULimit
	}
	return inject.AnnotationMemoryRequest + ", " + inject.AnnotationMemoryLimit
}

func validImage(s string) error {
	if s == "" || len(s) > 512 || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return errors.New("is not an image reference")
	}
	return nil
}

func validTimeout(d time.Duration) error {
	if d < time.Millisecond || d > 10*time.Second {
		return fmt.Errorf("%s is outside 1ms to 10s", d)
	}
	return nil
}

// container is the sidecar. Every field the API server would default is set, so that the
// stored pod holds exactly what is written here.
func (c *Config) container(o options) corev1.Container {
	args := []string{
		inject.Arg(inject.FlagListen, fmt.Sprintf(":%d", o.listenPort)),
		inject.Arg(inject.FlagUpstream, fmt.Sprintf("http://127.0.0.1:%d", o.upstreamPort)),
		inject.Arg(inject.FlagConfig, path.Join(inject.PoliciesDir, policy.DataKey)),
		inject.Arg(inject.FlagPodLabelsFile, path.Join(inject.PodInfoDir, inject.PodLabelsFile)),
		inject.Arg(inject.FlagMetricsListen, fmt.Sprintf(":%d", o.metrics)),
	}
	env := []corev1.EnvVar{{Name: inject.EnvName(inject.FlagPodName), ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: inject.PodNameFieldPath},
	}}}
	if c.RedisURL != "" {
		u, _ := c.redisURL() // Validate checked it
		args = append(args, inject.Arg(inject.FlagRedisURL, u))
		if s := c.RedisPasswordSecret; s != nil {
			env = append(env, corev1.EnvVar{Name: inject.EnvRedisPassword, ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: s.LocalObjectReference, Key: s.Key, Optional: ptr.To(false)},
			}})
		}
	}
	if o.redisTimeout != 0 {
		args = append(args, inject.Arg(inject.FlagRedisTimeout, o.redisTimeout.String()))
	}
	if c.RedisIdleTimeout != 0 {
		args = append(args, inject.Arg(inject.FlagRedisIdleTimeout, c.RedisIdleTimeout.String()))
	}
	probe := func(urlPath string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: urlPath, Port: intstr.FromInt32(o.metrics), Scheme: corev1.URISchemeHTTP,
			}},
			TimeoutSeconds: 1, PeriodSeconds: period, SuccessThreshold: 1, FailureThreshold: failures,
		}
	}
	pull := c.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	return corev1.Container{
		Name:  inject.ContainerName,
		Image: o.image,
		Args:  args,
		Ports: []corev1.ContainerPort{
			{Name: cmp.Or(o.takeOver, inject.PortName), ContainerPort: o.listenPort, Protocol: corev1.ProtocolTCP},
			{Name: inject.MetricsPortName, ContainerPort: o.metrics, Protocol: corev1.ProtocolTCP},
		},
		Env:       env,
		Resources: o.resources,
		// A restartable init container is a native sidecar: started before the application's
		// containers, stopped after them.
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		VolumeMounts: []corev1.VolumeMount{
			{Name: inject.PoliciesVolume, MountPath: inject.PoliciesDir, ReadOnly: true},
			{Name: inject.PodInfoVolume, MountPath: inject.PodInfoDir, ReadOnly: true},
		},
		// The application starts once the sidecar answers /healthz (up to 30s).
		StartupProbe:             probe("/healthz", 1, 30),
		ReadinessProbe:           probe("/readyz", 5, 3),
		LivenessProbe:            probe("/healthz", 10, 3),
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		ImagePullPolicy:          pull,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(UID),
			RunAsGroup:               ptr.To(UID),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// volumes are the namespace's rendered policies (optional: a namespace without policies still
// runs its pods, and the sidecar passes traffic through) and the pod's labels, which select the
// policies that apply to it and change when the labels do.
func volumes() []corev1.Volume {
	return []corev1.Volume{
		{Name: inject.PoliciesVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: policy.ConfigMapName},
			Optional:             ptr.To(true),
			DefaultMode:          ptr.To[int32](0o444),
		}}},
		{Name: inject.PodInfoVolume, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{
				Path: inject.PodLabelsFile, FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels"},
			}},
			DefaultMode: ptr.To[int32](0o444),
		}}},
	}
}
