package controller

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/internal/inject"
)

// uninjectedPod reports whether a pod asks for the sidecar but runs without it (no container
// or init container named inject.ContainerName), as happens when the webhook was unreachable
// when the pod was created.
func uninjectedPod(pod *corev1.Pod) bool {
	if !inject.Wants(pod.Annotations) {
		return false
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == inject.ContainerName {
				return false
			}
		}
	}
	return true
}
