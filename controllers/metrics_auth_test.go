package controllers_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// freeAddress returns a loopback address with a port nothing listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// TestMetricsServedToAuthorizedScrapersOnly starts the operator with the default, secure metrics endpoint and
// scrapes it as a service account bound to the shipped metrics-reader ClusterRole, as one without it, and
// without a token.
func TestMetricsServedToAuthorizedScrapersOnly(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	const ns = "metrics-auth"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	role.Name = "metrics-auth-test-reader"
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{}) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-auth-test-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}) })
	token := func(name string) string {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scraper, stranger := token("scraper"), token("stranger")

	opts := envtestutil.TestOptions()
	opts.MetricsAddr, opts.MetricsSecure = freeAddress(t), true
	_, _ = envtestutil.StartOperator(t, env.Config, opts)

	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The endpoint serves a self-signed certificate by default.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test of a self-signed endpoint
	}}
	scrape := func(token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+opts.MetricsAddr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	envtestutil.Eventually(t, time.Minute, func() error {
		code, body, err := scrape(scraper)
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.Contains(body, "celaudit_results{") {
			return fmt.Errorf("authorized scrape: status %d, body %.200q", code, body)
		}
		return nil
	})
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"a service account without the metrics-reader role", stranger, http.StatusForbidden},
		{"no token", "", http.StatusUnauthorized},
		// controller-runtime answers a token the TokenReview rejects as malformed with 500.
		{"an invalid token", "not-a-token", http.StatusInternalServerError},
	} {
		code, body, err := scrape(tc.token)
		if err != nil || code != tc.want || strings.Contains(body, "celaudit_") {
			t.Errorf("scrape as %s: status %d (%v), want %d and no metrics; body %.200q", tc.who, code, err, tc.want, body)
		}
	}
}
