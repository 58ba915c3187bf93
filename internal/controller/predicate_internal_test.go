package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/inject"
)

func TestPodUpdateMatters(t *testing.T) {
	// base is a running, ready pod that asks for the sidecar and has it.
	base := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{inject.AnnotationInject: "true"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}, {Name: inject.ContainerName}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			}},
		}
	}
	notReady := func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
	tests := map[string]struct {
		both   func(p *corev1.Pod) // applied to the old and the new pod, before change
		change func(p *corev1.Pod)
		want   bool
	}{
		"no change": {nil, func(*corev1.Pod) {}, false},
		"restart count and probe time only": {nil, func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", RestartCount: 3}}
			p.Status.Conditions[0].LastProbeTime = metav1.Unix(1770000000, 0)
		}, false},
		"resource version and other annotations": {nil, func(p *corev1.Pod) {
			p.ResourceVersion = "42"
			p.Annotations["example.com/note"] = "x"
		}, false},
		"inject annotation removed, sidecar still there": {nil, func(p *corev1.Pod) {
			delete(p.Annotations, inject.AnnotationInject)
		}, false},
		"labels removed": {nil, func(p *corev1.Pod) { p.Labels = nil }, true},
		"label value":    {nil, func(p *corev1.Pod) { p.Labels["app"] = "db" }, true},
		"label added":    {nil, func(p *corev1.Pod) { p.Labels["tier"] = "front" }, true},
		"not ready":      {nil, notReady, true},
		"pending":        {nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, true},
		"succeeded":      {nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		"deleting": {nil, func(p *corev1.Pod) {
			now := metav1.Unix(1770000000, 0)
			p.DeletionTimestamp = &now
		}, true},
		"not ready, then failed": {notReady, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, true},
		"not ready, then deleting": {notReady, func(p *corev1.Pod) {
			now := metav1.Unix(1770000000, 0)
			p.DeletionTimestamp = &now
		}, true},
		"asks for the sidecar, runs without it": {nil, func(p *corev1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] }, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			oldPod, newPod := base(), base()
			if tc.both != nil {
				tc.both(oldPod)
				tc.both(newPod)
			}
			tc.change(newPod)
			if got := podUpdateMatters(event.UpdateEvent{ObjectOld: oldPod, ObjectNew: newPod}); got != tc.want {
				t.Errorf("old -> new: %v, want %v", got, tc.want)
			}
			if got := podUpdateMatters(event.UpdateEvent{ObjectOld: newPod, ObjectNew: oldPod}); got != tc.want {
				t.Errorf("new -> old: %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("not a pod", func(t *testing.T) {
		if !podUpdateMatters(event.UpdateEvent{ObjectOld: &corev1.ConfigMap{}, ObjectNew: &corev1.ConfigMap{}}) {
			t.Error("an update of another kind was filtered out")
		}
	})
}

func TestPolicyUpdateMatters(t *testing.T) {
	now := metav1.Unix(1770000000, 0)
	base := func() *v1alpha1.RateLimitPolicy {
		return &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Generation: 3, ResourceVersion: "7"}}
	}
	tests := map[string]struct {
		change func(p *v1alpha1.RateLimitPolicy)
		want   bool
	}{
		"status only": {func(p *v1alpha1.RateLimitPolicy) {
			p.ResourceVersion = "8"
			p.Status.ObservedGeneration = 3
			p.Status.Summary = "TokenBucket 10/1m"
		}, false},
		"labels and annotations": {func(p *v1alpha1.RateLimitPolicy) { p.Labels = map[string]string{"team": "a"} }, false},
		"spec (generation)":      {func(p *v1alpha1.RateLimitPolicy) { p.Generation = 4 }, true},
		"deleting":               {func(p *v1alpha1.RateLimitPolicy) { p.DeletionTimestamp = &now }, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			oldP, newP := base(), base()
			tc.change(newP)
			if got := policyUpdateMatters(event.UpdateEvent{ObjectOld: oldP, ObjectNew: newP}); got != tc.want {
				t.Errorf("old -> new: %v, want %v", got, tc.want)
			}
		})
	}
}
