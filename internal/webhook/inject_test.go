package webhook

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/inject"
)

func pod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}
}

func TestConfigValidate(t *testing.T) {
	secret := func(name, key string) *corev1.SecretKeySelector {
		return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
	}
	tests := map[string]struct {
		config Config
		errs   []string // substrings; none means valid
	}{
		"image only":            {config: Config{Image: "sidecar:1"}},
		"every setting":         {config: Config{Image: "sidecar:1", RedisURL: "redis+cluster://r:6379", RedisTLS: true, RedisPasswordSecret: secret("s", "k"), RedisTimeout: 50 * time.Millisecond}},
		"no image":              {config: Config{}, errs: []string{"sidecar image"}},
		"unknown redis scheme":  {config: Config{Image: "i", RedisURL: "http://r:6379"}, errs: []string{`scheme "http"`}},
		"unknown topology":      {config: Config{Image: "i", RedisURL: "redis+ring://r:6379"}, errs: []string{`scheme "redis+ring"`}},
		"half a secret":         {config: Config{Image: "i", RedisURL: "redis://r", RedisPasswordSecret: secret("s", "")}, errs: []string{"both a Secret name and a key"}},
		"timeout out of bounds": {config: Config{Image: "i", RedisTimeout: time.Minute}, errs: []string{"redis timeout: 1m0s is outside 1ms to 10s"}},
		"request above limit": {config: Config{Image: "i", Resources: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		}}, errs: []string{"sidecar resources: the cpu request 2 exceeds the limit 1"}},
		"unparsable URL hides itself": {config: Config{Image: "i", RedisURL: "redis://:pa ss@r:6379/%zz"},
			errs: []string{"redis URL does not parse"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.config.Validate()
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error mentioning %q", tc.errs)
			}
			for _, s := range tc.errs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Validate() = %q, want it to mention %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "pa ss") {
				t.Errorf("Validate() = %q leaks the URL's password", err)
			}
		})
	}
}

func TestRedisSettings(t *testing.T) {
	tests := map[string]struct {
		config   Config
		wantArgs []string // the args after --metrics-listen
		wantEnv  bool
	}{
		"no redis: in-memory sidecars":       {config: Config{Image: "i"}},
		"no redis ignores the secret":        {config: Config{Image: "i", RedisPasswordSecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}},
		"plain":                              {config: Config{Image: "i", RedisURL: "redis://r:6379/0"}, wantArgs: []string{"--redis-url=redis://r:6379/0"}},
		"TLS upgrades the scheme":            {config: Config{Image: "i", RedisURL: "redis://r:6379/0", RedisTLS: true}, wantArgs: []string{"--redis-url=rediss://r:6379/0"}},
		"TLS upgrades a cluster scheme":      {config: Config{Image: "i", RedisURL: "redis+cluster://r:6379?addr=s:6379", RedisTLS: true}, wantArgs: []string{"--redis-url=rediss+cluster://r:6379?addr=s:6379"}},
		"TLS keeps rediss":                   {config: Config{Image: "i", RedisURL: "rediss://r:6379", RedisTLS: true}, wantArgs: []string{"--redis-url=rediss://r:6379"}},
		"password from a secret and timeout": {config: Config{Image: "i", RedisURL: "redis://r", RedisTimeout: time.Second, RedisPasswordSecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}, wantArgs: []string{"--redis-url=redis://r", "--redis-timeout=1s"}, wantEnv: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := tc.config.Validate(); err != nil {
				t.Fatal(err)
			}
			p := pod(map[string]string{inject.AnnotationInject: "true"})
			if changed, err := tc.config.Mutate(p); !changed || err != nil {
				t.Fatalf("Mutate() = %v, %v; want true, nil", changed, err)
			}
			c := p.Spec.InitContainers[0]
			if got := c.Args[5:]; !reflect.DeepEqual(got, tc.wantArgs) && len(got)+len(tc.wantArgs) > 0 {
				t.Errorf("redis args = %q, want %q", got, tc.wantArgs)
			}
			// The pod's name always comes first, from the downward API; the password only with a Secret.
			if len(c.Env) == 0 || c.Env[0].Name != inject.EnvName(inject.FlagPodName) || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Fatalf("env = %+v, want %s from metadata.name first", c.Env, inject.EnvName(inject.FlagPodName))
			}
			rest := c.Env[1:]
			if gotEnv := len(rest) == 1 && rest[0].Name == inject.EnvRedisPassword && rest[0].ValueFrom.SecretKeyRef.Name == "s"; gotEnv != tc.wantEnv {
				t.Errorf("env = %+v, want the password env: %v", c.Env, tc.wantEnv)
			}
		})
	}
}

// FuzzMutate feeds arbitrary annotation values: Mutate never panics, names the annotation it
// rejects and leaves the pod unchanged then, and injects at most once.
func FuzzMutate(f *testing.F) {
	f.Add("8080", "8081", "9090", "100m", "64Mi", "50ms", "img:1")
	f.Add("http", "-1", "65536", "lots", "1Gx", "soon", "bad image")
	f.Add("", "0", "9090", "0", "0", "0s", "")
	f.Add("8081", "8081", "8081", "1e3", "1E", "1h", "i")
	config := Config{Image: "sidecar:1", RedisURL: "redis://r"}
	f.Fuzz(func(t *testing.T, upstream, listen, metrics, cpu, memory, timeout, image string) {
		annotations := map[string]string{
			inject.AnnotationInject: "true", inject.AnnotationUpstreamPort: upstream, inject.AnnotationListenPort: listen,
			inject.AnnotationMetricsPort: metrics, inject.AnnotationCPURequest: cpu, inject.AnnotationMemoryLimit: memory,
			inject.AnnotationRedisTimeout: timeout, inject.AnnotationImage: image,
		}
		p := pod(annotations)
		before := p.DeepCopy()
		changed, err := config.Mutate(p)
		if err != nil {
			if changed || !reflect.DeepEqual(p, before) {
				t.Fatalf("Mutate() = %v, %v and changed the pod", changed, err)
			}
			if !strings.Contains(err.Error(), "sluice.dev/") {
				t.Fatalf("Mutate() error %q names no annotation", err)
			}
			return
		}
		if !changed || len(p.Spec.InitContainers) != 1 || !Wants(before) || HasSidecar(before) || !HasSidecar(p) {
			t.Fatalf("Mutate() = %v, nil; init containers %d", changed, len(p.Spec.InitContainers))
		}
		again := p.DeepCopy()
		if changed, err := config.Mutate(again); changed || err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("second Mutate() = %v, %v; want no change", changed, err)
		}
	})
}
