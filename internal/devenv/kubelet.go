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
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/internal/testutil/kubeletdir"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// Kubelet plays the kubelet's part for injected pods: it runs a pod's native sidecar (an init
// container with restartPolicy Always) as a local process, with the pod's address standing for
// a loopback address of its own. It mounts what the container mounts the way the kubelet
// does: ConfigMap volumes as a directory whose content is swapped atomically through a
// `..data` symlink when the ConfigMap changes, downward-API label files in the kubelet's
// format; and it resolves env from values, Secrets, ConfigMaps and pod fields.
type Kubelet struct {
	Client client.Client
	// Binaries maps a container image to a local executable; a container whose command is
	// empty runs Binaries[image] with its args.
	Binaries map[string]string
	// Dir holds the pods' volumes and logs.
	Dir string
	// Log receives the processes' output; nil discards it.
	Log io.Writer
	// SyncInterval is how often mounted ConfigMaps are re-read (the kubelet takes up to a
	// minute; the default here is 200ms).
	SyncInterval time.Duration
}

// RunningPod is a pod whose sidecar runs as a local process.
type RunningPod struct {
	Name, Namespace string
	// IP is the loopback address standing for the pod's IP.
	IP string
	// Container is the sidecar container as run, after path and address rewriting.
	Container corev1.Container
	// Args are the process's arguments.
	Args []string

	cmd    *exec.Cmd
	done   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Run starts the native sidecar of the named pod with ip as the pod's address, waits until its
// readiness probe passes, then marks the pod Running and Ready with that IP, as the kubelet
// would. Stop the returned pod to end the process.
func (k *Kubelet) Run(ctx context.Context, namespace, name, ip string) (*RunningPod, error) {
	var pod corev1.Pod
	if err := k.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pod); err != nil {
		return nil, err
	}
	var sidecar *corev1.Container
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecar = c.DeepCopy()
			break
		}
	}
	if sidecar == nil {
		return nil, fmt.Errorf("pod %s/%s has no native sidecar: was it injected?", namespace, name)
	}
	podDir := filepath.Join(k.Dir, namespace+"_"+name)
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	rp := &RunningPod{Name: name, Namespace: namespace, IP: ip, done: make(chan struct{}), cancel: cancel}

	mounts := map[string]string{} // mountPath → host directory
	for _, m := range sidecar.VolumeMounts {
		vol := findVolume(&pod, m.Name)
		if vol == nil {
			cancel()
			return nil, fmt.Errorf("volume %q of mount %s is not in the pod", m.Name, m.MountPath)
		}
		host := filepath.Join(podDir, "volumes", m.Name)
		if err := k.mount(runCtx, rp, &pod, vol, host, ip); err != nil {
			cancel()
			return nil, fmt.Errorf("mounting %s: %w", m.Name, err)
		}
		mounts[m.MountPath] = host
	}
	rewrite := func(s string) string { return rewriteValue(s, mounts, ip) }

	env := os.Environ()
	for _, e := range sidecar.Env {
		v, err := k.envValue(ctx, &pod, e, ip)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		env = append(env, e.Name+"="+rewrite(v))
	}
	argv := slices.Concat(sidecar.Command, sidecar.Args)
	for i := range argv {
		argv[i] = rewrite(argv[i])
	}
	bin := k.Binaries[sidecar.Image]
	if bin == "" {
		cancel()
		return nil, fmt.Errorf("no local binary for image %q", sidecar.Image)
	}
	if len(sidecar.Command) > 0 {
		argv = argv[1:] // the image's path of the binary; run the local one instead
	}
	rp.Container, rp.Args = *sidecar, argv

	logFile, err := os.Create(filepath.Join(podDir, sidecar.Name+".log"))
	if err != nil {
		cancel()
		return nil, err
	}
	out := io.Writer(logFile)
	if k.Log != nil {
		out = io.MultiWriter(logFile, k.Log)
	}
	rp.cmd = exec.Command(bin, argv...)
	rp.cmd.Env = env
	rp.cmd.Stdout, rp.cmd.Stderr = out, out
	proc.Own(rp.cmd)
	if err := rp.cmd.Start(); err != nil {
		cancel()
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		_ = rp.cmd.Wait()
		_ = logFile.Close()
		close(rp.done)
	}()

	if err := k.waitReady(ctx, rp, sidecar); err != nil {
		rp.Stop()
		return nil, err
	}
	if err := k.setStatus(ctx, namespace, name, ip, true); err != nil {
		rp.Stop()
		return nil, err
	}
	return rp, nil
}

// Stop ends the sidecar process (SIGTERM, then SIGKILL after 10s) and the volume syncing.
func (rp *RunningPod) Stop() {
	rp.cancel()
	if rp.cmd != nil && rp.cmd.Process != nil {
		_ = syscall.Kill(-rp.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-rp.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-rp.cmd.Process.Pid, syscall.SIGKILL)
			<-rp.done
		}
	}
	rp.wg.Wait()
}

// Exited reports whether the process has ended.
func (rp *RunningPod) Exited() bool {
	select {
	case <-rp.done:
		return true
	default:
		return false
	}
}

func findVolume(pod *corev1.Pod, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

func (k *Kubelet) mount(ctx context.Context, rp *RunningPod, pod *corev1.Pod, vol *corev1.Volume, host, ip string) error {
	switch {
	case vol.ConfigMap != nil:
		src := vol.ConfigMap
		optional := src.Optional != nil && *src.Optional
		read := func(ctx context.Context) (map[string][]byte, string, error) {
			var cm corev1.ConfigMap
			err := k.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: src.Name}, &cm)
			if apierrors.IsNotFound(err) && optional {
				return map[string][]byte{}, "absent", nil
			}
			if err != nil {
				return nil, "", err
			}
			files := map[string][]byte{}
			for key, v := range cm.Data {
				files[key] = []byte(v)
			}
			for key, v := range cm.BinaryData {
				files[key] = v
			}
			if len(src.Items) > 0 {
				projected := map[string][]byte{}
				for _, it := range src.Items {
					if v, ok := files[it.Key]; ok {
						projected[it.Path] = v
					}
				}
				files = projected
			}
			return files, cm.ResourceVersion, nil
		}
		files, version, err := read(ctx)
		if err != nil {
			return err
		}
		w := kubeletdir.New(host)
		if err := w.Write(files); err != nil {
			return err
		}
		interval := k.SyncInterval
		if interval == 0 {
			interval = 200 * time.Millisecond
		}
		rp.wg.Add(1)
		go func() {
			defer rp.wg.Done()
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				files, v, err := read(ctx)
				if err != nil || v == version {
					continue
				}
				if w.Write(files) == nil {
					version = v
				}
			}
		}()
		return nil
	case vol.DownwardAPI != nil:
		files := map[string][]byte{}
		for _, it := range vol.DownwardAPI.Items {
			if it.FieldRef == nil {
				continue
			}
			v, err := podField(pod, it.FieldRef.FieldPath, ip)
			if err != nil {
				return err
			}
			files[it.Path] = []byte(v)
		}
		return kubeletdir.New(host).Write(files)
	case vol.EmptyDir != nil:
		return os.MkdirAll(host, 0o755)
	default:
		return fmt.Errorf("volume type of %q is not supported here", vol.Name)
	}
}

func (k *Kubelet) envValue(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar, ip string) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	switch src := e.ValueFrom; {
	case src.SecretKeyRef != nil:
		var s corev1.Secret
		if err := k.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: src.SecretKeyRef.Name}, &s); err != nil {
			if apierrors.IsNotFound(err) && src.SecretKeyRef.Optional != nil && *src.SecretKeyRef.Optional {
				return "", nil
			}
			return "", err
		}
		return string(s.Data[src.SecretKeyRef.Key]), nil
	case src.ConfigMapKeyRef != nil:
		var cm corev1.ConfigMap
		if err := k.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: src.ConfigMapKeyRef.Name}, &cm); err != nil {
			if apierrors.IsNotFound(err) && src.ConfigMapKeyRef.Optional != nil && *src.ConfigMapKeyRef.Optional {
				return "", nil
			}
			return "", err
		}
		return cm.Data[src.ConfigMapKeyRef.Key], nil
	case src.FieldRef != nil:
		return podField(pod, src.FieldRef.FieldPath, ip)
	case src.ResourceFieldRef != nil:
		return "", nil
	}
	return "", nil
}

// podField returns a downward-API field; labels and annotations in the kubelet's format,
// one `key="value"` per line, sorted.
func podField(pod *corev1.Pod, path, ip string) (string, error) {
	format := func(m map[string]string) string {
		keys := make([]string, 0, len(m))
		for key := range m {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		var b strings.Builder
		for i, key := range keys {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(key + "=" + strconv.Quote(m[key]))
		}
		return b.String()
	}
	switch path {
	case "metadata.labels":
		return format(pod.Labels), nil
	case "metadata.annotations":
		return format(pod.Annotations), nil
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "status.podIP", "status.hostIP":
		return ip, nil
	case "spec.nodeName":
		return "devenv", nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	}
	return "", fmt.Errorf("field %s is not supported here", path)
}

var listenOnly = regexp.MustCompile(`^(-{1,2}[A-Za-z0-9-]+=)?:(\d+)$`)

// rewriteValue maps mount paths to host directories and the pod's own addresses (":port",
// 0.0.0.0, 127.0.0.1, localhost) to ip.
func rewriteValue(s string, mounts map[string]string, ip string) string {
	paths := make([]string, 0, len(mounts))
	for p := range mounts {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	for _, p := range paths {
		s = strings.ReplaceAll(s, p, mounts[p])
	}
	if m := listenOnly.FindStringSubmatch(s); m != nil {
		return m[1] + net.JoinHostPort(ip, m[2])
	}
	for _, local := range []string{"0.0.0.0", "127.0.0.1", "localhost"} {
		s = strings.ReplaceAll(s, local, ip)
	}
	return s
}

func (k *Kubelet) waitReady(ctx context.Context, rp *RunningPod, c *corev1.Container) error {
	probe := c.ReadinessProbe
	if probe == nil {
		probe = c.StartupProbe
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if rp.Exited() {
			return false, fmt.Errorf("sidecar of %s/%s exited; see %s", rp.Namespace, rp.Name, filepath.Join(k.Dir, rp.Namespace+"_"+rp.Name))
		}
		return probe == nil || probeOK(ctx, probe, c, rp.IP), nil
	})
	switch {
	case err == nil, !wait.Interrupted(err):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		return fmt.Errorf("sidecar of %s/%s not ready after 30s", rp.Namespace, rp.Name)
	}
}

func probeOK(ctx context.Context, p *corev1.Probe, c *corev1.Container, ip string) bool {
	switch {
	case p.HTTPGet != nil:
		port := p.HTTPGet.Port.IntValue()
		if port == 0 {
			for _, cp := range c.Ports {
				if cp.Name == p.HTTPGet.Port.String() {
					port = int(cp.ContainerPort)
				}
			}
		}
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, strconv.Itoa(port))+p.HTTPGet.Path, nil)
		if err != nil {
			return false
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case p.TCPSocket != nil:
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(p.TCPSocket.Port.IntValue())), time.Second)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}
	return true
}

// setStatus reports the pod Running with the given IP and readiness, as the kubelet does.
func (k *Kubelet) setStatus(ctx context.Context, namespace, name, ip string, ready bool) error {
	var pod corev1.Pod
	if err := k.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pod); err != nil {
		return err
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}, {Type: corev1.ContainersReady, Status: status}}
	return k.Client.Status().Update(ctx, &pod)
}
