package controller_test

import (
	"context"
	"fmt"
	"sync/atomic"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

var nsCounter atomic.Int64

// newNamespace creates a namespace for one spec; envtest never deletes namespaces, so each
// spec gets a fresh one.
func newNamespace(ctx context.Context) string {
	name := fmt.Sprintf("spec-%d", nsCounter.Add(1))
	Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

// newPolicy is a valid policy with one TokenBucket rule, changed by the mutators.
func newPolicy(ns, name string, mutate ...func(*v1alpha1.RateLimitPolicy)) *v1alpha1.RateLimitPolicy {
	p := &v1alpha1.RateLimitPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RateLimitPolicy"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RateLimitPolicySpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Rules: []v1alpha1.Rule{{
				Name:      "per-client",
				Key:       []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}},
				Algorithm: v1alpha1.TokenBucket,
				Limit:     10,
				Window:    "1s",
			}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// rule0 applies a change to the first rule.
func rule0(f func(r *v1alpha1.Rule)) func(*v1alpha1.RateLimitPolicy) {
	return func(p *v1alpha1.RateLimitPolicy) { f(&p.Spec.Rules[0]) }
}

func newPod(ns, name string, podLabels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: podLabels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}},
			TerminationGracePeriodSeconds: ptr.To[int64](0)},
	}
}

// setReady plays the kubelet's part: marks the pod Running and Ready (or not).
func setReady(ctx context.Context, pod *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
}
