package chart_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var reportCRDs = []string{"policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"}

// TestChartOnAPIServer installs the chart with helm into a real kube-apiserver that has no report CRDs, then
// checks the lookup of the shared CRDs and dry-runs every rendered object.
func TestChartOnAPIServer(t *testing.T) {
	t.Parallel()
	c, kubeconfig := startAPIServer(t)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}); err != nil {
		t.Fatal(err)
	}
	kube := func(args ...string) []string { return append(args, "--kubeconfig", kubeconfig) }
	crd := func(t *testing.T, name string) *apiextensionsv1.CustomResourceDefinition {
		t.Helper()
		var out apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &out); err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		return &out
	}

	var uids []string
	t.Run("install creates the report CRDs it finds missing", func(t *testing.T) {
		out := mustHelm(t, kube("install", release, chartDir, "--namespace", namespace, "--create-namespace",
			"--set", "metrics.serviceMonitor.enabled=true,grafana.dashboard.namespace=monitoring,policyReporter.listPasses=true")...)
		for _, want := range []string{"Reports list the verdicts pass,fail,warn,error,skip;", "ConfigMap celaudit-dashboard in namespace monitoring"} {
			if !strings.Contains(out, want) {
				t.Errorf("helm install's notes lack %q:\n%s", want, out)
			}
		}
		for _, name := range append(slices.Clone(reportCRDs), "auditpolicies.audit.celaudit.io") {
			uids = append(uids, string(crd(t, name).UID))
		}
		for _, name := range reportCRDs {
			a := crd(t, name).Annotations
			if a["meta.helm.sh/release-name"] != release || a["helm.sh/resource-policy"] != "keep" {
				t.Errorf("%s annotations %v", name, a)
			}
		}
		for _, obj := range []client.Object{
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "celaudit-controller-manager"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: "celaudit-dashboard"}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "celaudit-admission-policy-manager-rolebinding"}},
		} {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				t.Errorf("after helm install: %v", err)
			}
		}
	})

	t.Run("upgrade keeps the release's report CRDs", func(t *testing.T) {
		mustHelm(t, kube("upgrade", release, chartDir, "--namespace", namespace, "--set", "reports.api=both")...)
		manifest := decode(t, mustHelm(t, kube("get", "manifest", release, "--namespace", namespace)...))
		for i, name := range reportCRDs {
			if manifest.find("CustomResourceDefinition", name) == nil {
				t.Errorf("the upgraded release lacks its own CRD %s: the lookup took it for another owner's", name)
			}
			if uid := string(crd(t, name).UID); uid != uids[i] {
				t.Errorf("%s was recreated", name)
			}
		}
		var role rbacv1.ClusterRole
		if err := c.Get(ctx, client.ObjectKey{Name: "celaudit-manager-role"}, &role); err != nil {
			t.Errorf("reports.api=both: %v", err)
		} else if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.APIGroups, "openreports.io") }) {
			t.Error("reports.api=both: the manager ClusterRole grants nothing on openreports.io")
		}
	})

	t.Run("upgrade to sharded replaces the Deployment with a StatefulSet, and back", func(t *testing.T) {
		upgradeToShardedAndBack(ctx, t, c, kube)
	})

	t.Run("another release leaves CRDs it does not own alone", func(t *testing.T) {
		// helm template --dry-run=server looks up as install does.
		other := decode(t, mustHelm(t, kube("template", "other", chartDir, "--namespace", "other", "--dry-run=server")...))
		same := decode(t, mustHelm(t, kube("template", release, chartDir, "--namespace", namespace, "--dry-run=server")...))
		for _, name := range reportCRDs {
			if other.find("CustomResourceDefinition", name) != nil {
				t.Errorf("release other renders %s, which release celaudit owns", name)
			}
			if same.find("CustomResourceDefinition", name) == nil {
				t.Errorf("release celaudit does not render its own %s", name)
			}
		}
		// A real install would fail on a rendered CRD that another release owns.
		mustHelm(t, kube("install", "other", chartDir, "--namespace", "other", "--create-namespace", "--set", "grafana.dashboard.enabled=false")...)
		mustHelm(t, kube("uninstall", "other", "--namespace", "other")...)
	})

	t.Run("uninstall keeps the CRDs", func(t *testing.T) {
		mustHelm(t, kube("uninstall", release, "--namespace", namespace)...)
		for i, name := range append(slices.Clone(reportCRDs), "auditpolicies.audit.celaudit.io") {
			if uid := string(crd(t, name).UID); uid != uids[i] {
				t.Errorf("%s was recreated", name)
			}
		}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "celaudit-controller-manager"}}
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); !apierrors.IsNotFound(err) {
			t.Errorf("Deployment after helm uninstall: %v", err)
		}
	})

	t.Run("CRDs owned by someone else are never rendered", func(t *testing.T) {
		for _, name := range reportCRDs {
			obj := crd(t, name)
			delete(obj.Annotations, "meta.helm.sh/release-name")
			delete(obj.Annotations, "meta.helm.sh/release-namespace")
			if err := c.Update(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		objs := decode(t, mustHelm(t, kube("template", release, chartDir, "--namespace", namespace, "--dry-run=server")...))
		for _, name := range reportCRDs {
			if objs.find("CustomResourceDefinition", name) != nil {
				t.Errorf("renders %s, which an installer other than this release owns", name)
			}
		}
		mustHelm(t, kube("install", release, chartDir, "--namespace", namespace)...)
		mustHelm(t, kube("uninstall", release, "--namespace", namespace)...)
	})

	// Every object under several value combinations, as a server-side dry run with strict field validation:
	// the API server's schema catches misspelt or misplaced fields.
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"everything on", []string{"--set", "replicaCount=2,reports.api=both,reports.results={fail,error},metrics.serviceMonitor.enabled=true",
			"--set", "rbac.readAccess=restricted,rbac.restricted.extraRules[0].apiGroups[0]=example.com,rbac.restricted.extraRules[0].resources[0]=*,rbac.restricted.extraRules[0].verbs={get,list,watch}",
			"--set", "metrics.serviceMonitor.interval=30s,metrics.serviceMonitor.scrapeTimeout=10s,metrics.serviceMonitor.labels.release=kps",
			"--set", "grafana.dashboard.namespace=monitoring,grafana.dashboard.annotations.grafana_folder=Policies",
			"--set", "audit.workers=4,audit.pageSize=1000,audit.resyncPeriod=30m,kubeAPI.qps=100,kubeAPI.burst=800,logLevel=debug",
			"--set", "imagePullSecrets[0].name=regcred,podAnnotations.a=b,podLabels.c=d,priorityClassName=system-cluster-critical",
			"--set", "nodeSelector.kubernetes\\.io/os=linux,tolerations[0].key=dedicated,tolerations[0].operator=Exists",
			"--set", "extraEnv[0].name=GODEBUG,extraEnv[0].value=x509sha1=0,serviceAccount.annotations.e=f",
			"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=zone",
			"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists"}},
		{"sharded", []string{"--set", sharded + ",metrics.serviceMonitor.enabled=true", "--set-string", "sharding.podDisruptionBudget.maxUnavailable=50%"}},
		{"everything off", []string{"--set", "leaderElection.enabled=false,admissionPolicies.manage=false,reports.installCRDs=false",
			"--set", "grafana.dashboard.enabled=false,policyReporter.listPasses=false,serviceAccount.create=false,serviceAccount.name=default"}},
	} {
		t.Run("server-side dry run: "+tc.name, func(t *testing.T) {
			for _, u := range render(t, tc.args...) {
				if err := dryRun(ctx, c, u); err != nil {
					t.Errorf("%s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
				}
			}
		})
	}
}

// upgradeToShardedAndBack upgrades the installed release to sharding.enabled with three replicas, which
// replaces the Deployment with the StatefulSet and adds its headless Service, PDB and Role, then back, which
// removes them, then to sharding.enabled with one replica, which keeps the Deployment and says why.
func upgradeToShardedAndBack(ctx context.Context, t *testing.T, c client.Client, kube func(...string) []string) {
	t.Helper()
	out := mustHelm(t, kube("upgrade", release, chartDir, "--namespace", namespace, "--reuse-values", "--set", sharded)...)
	for _, want := range []string{"rollout status statefulset/" + statefulSetName, "sharded over the 3 members of StatefulSet " + statefulSetName} {
		if !strings.Contains(out, want) {
			t.Errorf("helm upgrade's notes lack %q:\n%s", want, out)
		}
	}
	shardedObjects := []client.Object{
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: statefulSetName}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: headlessName}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: statefulSetName}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: memberRole}},
	}
	for _, obj := range shardedObjects {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Errorf("after the upgrade to sharded: %v", err)
		}
	}
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: statefulSetName}}
	if err := c.Get(ctx, client.ObjectKeyFromObject(deployment), deployment); !apierrors.IsNotFound(err) {
		t.Errorf("the Deployment after the upgrade to sharded: %v; want NotFound", err)
	}
	out = mustHelm(t, kube("upgrade", release, chartDir, "--namespace", namespace, "--reuse-values", "--set", "sharding.enabled=false,replicaCount=1")...)
	if !strings.Contains(out, "rollout status deployment/"+statefulSetName) {
		t.Errorf("helm upgrade's notes lack the Deployment's rollout:\n%s", out)
	}
	for _, obj := range shardedObjects {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after the upgrade back: %v; want NotFound", obj, obj.GetName(), err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(deployment), deployment); err != nil {
		t.Errorf("the Deployment after the upgrade back: %v", err)
	}
	// sharding.enabled with one replica installs the Deployment and says why.
	out = mustHelm(t, kube("upgrade", release, chartDir, "--namespace", namespace, "--reuse-values", "--set", "sharding.enabled=true")...)
	if !strings.Contains(out, "sharding.enabled needs replicaCount > 1") {
		t.Errorf("helm upgrade's notes with sharding.enabled and one replica lack the warning:\n%s", out)
	}
}

// startAPIServer starts kube-apiserver and etcd with only the ServiceMonitor stand-in CRD installed, and
// returns a client and a kubeconfig file for helm.
func startAPIServer(t *testing.T) (client.Client, string) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with 'make test' (hack/setup-envtest.sh builds the control plane)")
	}
	te := &envtest.Environment{
		// Only a stand-in for the Prometheus Operator's CRD: the chart installs the others.
		CRDDirectoryPaths:     []string{filepath.Join("testdata")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := te.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = te.Stop() })
	user, err := te.AddUser(envtest.User{Name: "chart-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, kubeconfig
}

// dryRun sends the object to the API server as a dry-run create, or a dry-run update when it exists (the CRDs,
// installed for real), with strict field validation.
func dryRun(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	err := c.Create(ctx, u.DeepCopy(), client.DryRunAll, client.FieldValidation("Strict"))
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	existing := u.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(u), existing); err != nil {
		return err
	}
	obj := u.DeepCopy()
	obj.SetResourceVersion(existing.GetResourceVersion())
	return c.Update(ctx, obj, client.DryRunAll, client.FieldValidation("Strict"))
}
