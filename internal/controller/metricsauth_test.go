package controller_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/controller"
)

var _ = Describe("The manager's metrics endpoint", func() {
	It("refuses an unauthenticated scrape and an unauthorized one, and serves a caller bound to metrics-reader", func(ctx context.Context) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		addr := l.Addr().String()
		Expect(l.Close()).To(Succeed())
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{
			Scheme:                 controller.NewScheme(),
			Metrics:                controller.MetricsOptions(addr, true, ""),
			HealthProbeBindAddress: "0",
		})
		Expect(err).NotTo(HaveOccurred())
		mctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			defer GinkgoRecover()
			Expect(mgr.Start(mctx)).To(Succeed())
		}()

		// The ClusterRole exactly as config/rbac ships it, bound to a fresh ServiceAccount.
		raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "metrics_reader_role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var role rbacv1.ClusterRole
		Expect(yaml.Unmarshal(raw, &role)).To(Succeed())
		role.Name = "metrics-reader-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		Expect(k8sClient.Create(ctx, &role)).To(Succeed())
		ns := newNamespace(ctx)
		cs, err := kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		token := func(name string) string {
			Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
			tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			return tr.Status.Token
		}
		prometheus, stranger := token("prometheus"), token("stranger")
		Expect(k8sClient.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}},
		})).To(Succeed())

		// The certificate is the manager's self-signed one: what is checked here is who may read.
		httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed, loopback
		}}
		scrape := func(g Gomega, bearer string) (int, string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
			g.Expect(err).NotTo(HaveOccurred())
			if bearer != "" {
				req.Header.Set("Authorization", "Bearer "+bearer)
			}
			resp, err := httpc.Do(req)
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			g.Expect(err).NotTo(HaveOccurred())
			return resp.StatusCode, string(body)
		}
		Eventually(func(g Gomega) {
			code, body := scrape(g, prometheus)
			g.Expect(code).To(Equal(http.StatusOK), body)
			g.Expect(body).To(ContainSubstring("controller_runtime_"))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			code, _ := scrape(g, "")
			g.Expect(code).To(Equal(http.StatusUnauthorized))
			// A token the API server rejects: controller-runtime's filter answers 401, or 500
			// when the TokenReview itself reports an error; never the metrics.
			code, _ = scrape(g, "not-a-token")
			g.Expect(code).To(BeElementOf(http.StatusUnauthorized, http.StatusInternalServerError))
			code, _ = scrape(g, stranger)
			g.Expect(code).To(Equal(http.StatusForbidden))
		}).Should(Succeed())
		// Plain HTTP on the same port is not served.
		resp, err := http.Get("http://" + addr + "/metrics") //nolint:noctx // a refusal is expected
		if err == nil {
			_ = resp.Body.Close()
			Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "plain HTTP was served")
		}
	})
})
