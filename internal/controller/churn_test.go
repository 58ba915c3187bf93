package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/policy"
)

var _ = Describe("Pod churn", func() {
	It("is coalesced into at most one ConfigMap write per render interval, the newest state written last", func(ctx context.Context) {
		ns := newNamespace(ctx)
		Expect(k8sClient.Create(ctx, newPolicy(ns, "web"))).To(Succeed())
		Eventually(func(g Gomega) {
			_, doc := rendered(g, ctx, ns)
			g.Expect(doc.Policies).To(HaveLen(1))
		}).Should(Succeed())

		wc, err := client.NewWithWatch(cfg, client.Options{Scheme: controller.NewScheme()})
		Expect(err).NotTo(HaveOccurred())
		w, err := wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		writes := make(chan int, 1)
		go func() {
			n := 0
			for ev := range w.ResultChan() {
				if ev.Type == watch.Modified {
					n++
				}
			}
			writes <- n
		}()

		// 40 pods come up one by one: 80 pod events, each of which changes the rendered pods.
		const n = 40
		start := time.Now()
		var want []string
		for i := range n {
			pod := newPod(ns, fmt.Sprintf("web-%02d", i), map[string]string{"app": "web"})
			Expect(k8sClient.Create(ctx, pod)).To(Succeed())
			setReady(ctx, pod, true)
			want = append(want, pod.Name)
		}
		churn := time.Since(start)
		var hash string
		Eventually(func(g Gomega) {
			cm, doc := rendered(g, ctx, ns)
			g.Expect(doc.Policies[0].Pods).To(Equal(want))
			_, _, ready := status(g, ctx, ns, "web")
			g.Expect(ready.Message).To(ContainSubstring(cm.Annotations[policy.HashAnnotation][:12]))
			hash = cm.Annotations[policy.HashAnnotation]
		}).Should(Succeed())
		settled := time.Since(start)
		// A write the interval held back goes out within one interval after the burst.
		Consistently(func(g Gomega) {
			cm, _ := rendered(g, ctx, ns)
			g.Expect(cm.Annotations[policy.HashAnnotation]).To(Equal(hash))
		}).WithTimeout(2 * controller.DefaultRenderInterval).Should(Succeed())
		w.Stop()
		got := <-writes
		// One write when the burst starts, then at most one per interval until the newest is out.
		bound := int(settled/controller.DefaultRenderInterval) + 2
		GinkgoWriter.Printf("%d pod events in %v: %d ConfigMap writes (bound %d, settled after %v)\n", 2*n, churn, got, bound, settled)
		Expect(got).To(BeNumerically("<=", bound))
		Expect(got).To(BeNumerically("<", n), "the writes were not coalesced")
	})
})
