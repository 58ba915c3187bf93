package webhook

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sluice-dev/sluice/internal/inject"
)

// TestTakeOverPort: the sidecar's port takes the application's port name, the sidecar forwards
// to its number, and the application's probes and hooks naming it are pointed at the number.
func TestTakeOverPort(t *testing.T) {
	config := Config{Image: "sidecar:1"}
	p := pod(map[string]string{inject.AnnotationInject: "true", inject.AnnotationTakeOverPort: "http"})
	app := &p.Spec.Containers[0]
	app.Ports = []corev1.ContainerPort{{Name: "admin", ContainerPort: 9000}, {Name: "http", ContainerPort: 8080}}
	byName := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}
	app.ReadinessProbe = &corev1.Probe{ProbeHandler: byName}
	app.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("admin")}}}
	app.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}}
	app.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}}}

	if changed, err := config.Mutate(p); !changed || err != nil {
		t.Fatalf("Mutate() = %v, %v", changed, err)
	}
	sidecar := p.Spec.InitContainers[0]
	if sidecar.Ports[0].Name != "http" || sidecar.Ports[0].ContainerPort != inject.DefaultListenPort {
		t.Errorf("sidecar port %+v, want http on %d", sidecar.Ports[0], inject.DefaultListenPort)
	}
	if !slices.Contains(sidecar.Args, inject.Arg(inject.FlagUpstream, "http://127.0.0.1:8080")) {
		t.Errorf("sidecar args %q do not forward to 8080", sidecar.Args)
	}
	app = &p.Spec.Containers[0]
	if app.Ports[0].Name != "admin" || app.Ports[1].Name != "" || app.Ports[1].ContainerPort != 8080 {
		t.Errorf("application ports %+v, want admin kept and 8080 unnamed", app.Ports)
	}
	for what, port := range map[string]intstr.IntOrString{
		"readiness": app.ReadinessProbe.HTTPGet.Port, "startup": app.StartupProbe.TCPSocket.Port, "preStop": app.Lifecycle.PreStop.HTTPGet.Port,
	} {
		if port != intstr.FromInt32(8080) {
			t.Errorf("%s port %v, want 8080", what, port.String())
		}
	}
	if app.LivenessProbe.HTTPGet.Port != intstr.FromString("admin") {
		t.Errorf("a probe naming another port changed: %v", app.LivenessProbe.HTTPGet.Port.String())
	}
}

func TestTakeOverPortRefusals(t *testing.T) {
	config := Config{Image: "sidecar:1"}
	tests := map[string]struct {
		annotations map[string]string
		want        string
	}{
		"no such port":       {map[string]string{inject.AnnotationTakeOverPort: "web"}, `sluice.dev/take-over-port: "web" names no port`},
		"the sidecar's port": {map[string]string{inject.AnnotationTakeOverPort: inject.PortName}, "is the sidecar's own port"},
		"another upstream":   {map[string]string{inject.AnnotationTakeOverPort: "http", inject.AnnotationUpstreamPort: "3000"}, "is port 8080, but sluice.dev/upstream-port says 3000"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.annotations[inject.AnnotationInject] = "true"
			p := pod(tc.annotations)
			p.Spec.Containers[0].Ports[0].Name = "http"
			if changed, err := config.Mutate(p); changed || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Mutate() = %v, %v; want an error containing %q", changed, err, tc.want)
			}
		})
	}
}
