package chart_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The chart cannot read files outside its directory: these are copies that `make chart-sync` refreshes.
var chartCopies = map[string]string{
	"charts/celaudit/crds/audit.celaudit.io_auditpolicies.yaml":           "config/crd/bases/audit.celaudit.io_auditpolicies.yaml",
	"charts/celaudit/crds/audit.celaudit.io_auditshards.yaml":             "config/crd/bases/audit.celaudit.io_auditshards.yaml",
	"charts/celaudit/files/crds/wgpolicyk8s.io_policyreports.yaml":        "config/crd/bases/wgpolicyk8s.io_policyreports.yaml",
	"charts/celaudit/files/crds/wgpolicyk8s.io_clusterpolicyreports.yaml": "config/crd/bases/wgpolicyk8s.io_clusterpolicyreports.yaml",
	"charts/celaudit/files/rbac/role.yaml":                                "config/rbac/role.yaml",
	"charts/celaudit/files/rbac/resource_reader_restricted.yaml":          "config/components/restricted-read/resource_reader_restricted.yaml",
	"charts/celaudit/files/celaudit-dashboard.json":                       "config/grafana/celaudit-dashboard.json",
}

func TestChartCopiesEqualConfig(t *testing.T) {
	t.Parallel()
	for dst, src := range chartCopies {
		want, err := os.ReadFile(filepath.Join(repoRoot, src))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(repoRoot, dst))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from %s: run 'make chart-sync' (or 'make manifests') and commit", dst, src)
		}
	}
	// Every CRD config/crd installs is in the chart.
	bases, err := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bases {
		rel, _ := filepath.Rel(repoRoot, b)
		if !slices.Contains(mapValues(chartCopies), rel) {
			t.Errorf("%s has no copy in the chart: add it to the chart, 'make chart-sync' and this test", rel)
		}
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func TestChartLint(t *testing.T) {
	t.Parallel()
	mustHelm(t, "lint", "--strict", chartDir)
	mustHelm(t, "lint", "--strict", chartDir,
		"--set", "replicaCount=2,leaderElection.enabled=false,admissionPolicies.manage=false",
		"--set", "reports.api=both,reports.results={fail,error},metrics.serviceMonitor.enabled=true",
		"--set", "rbac.readAccess=restricted,audit.secrets=true",
		"--set", "grafana.dashboard.namespace=monitoring,grafana.dashboard.annotations.grafana_folder=Policies")
}

// TestDefaultInstallMatchesKustomize compares the default install with `kubectl kustomize config/default`,
// and the restricted read access (rbac.readAccess=restricted) with `kubectl kustomize config/restricted`: the
// same objects under the same names, the same RBAC, and the same manager container apart from the listed
// passes (policyReporter.listPasses).
func TestDefaultInstallMatchesKustomize(t *testing.T) {
	t.Parallel()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with 'make test' (hack/setup-envtest.sh builds kubectl)")
	}
	for _, tc := range []struct {
		dir  string
		args []string
	}{
		{"default", nil},
		{"restricted", []string{"--set", "rbac.readAccess=restricted"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			out, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(repoRoot, "config", tc.dir)).Output()
			if err != nil {
				t.Fatalf("kubectl kustomize config/%s: %v", tc.dir, err)
			}
			compareInstalls(t, decode(t, string(out)), render(t, tc.args...))
		})
	}
}

// compareInstalls compares the objects kustomize renders with those the chart renders.
func compareInstalls(t *testing.T, kust, chart objects) {
	t.Helper()
	for _, k := range kust {
		if k.GetKind() == "Namespace" {
			continue // Helm's --namespace (--create-namespace)
		}
		c := chart.find(k.GetKind(), k.GetName())
		if c == nil {
			t.Errorf("kustomize renders %s %s; the chart does not", k.GetKind(), k.GetName())
			continue
		}
		if k.GetNamespace() != c.GetNamespace() {
			t.Errorf("%s %s: namespace %q, kustomize %q", k.GetKind(), k.GetName(), c.GetNamespace(), k.GetNamespace())
		}
		compareObject(t, k, c)
	}
	for _, c := range chart {
		if kust.find(c.GetKind(), c.GetName()) == nil && c.GetName() != "celaudit-dashboard" {
			t.Errorf("the chart renders %s %s, which kustomize does not", c.GetKind(), c.GetName())
		}
	}
}

func compareObject(t *testing.T, k, c *unstructured.Unstructured) {
	t.Helper()
	what := k.GetKind() + " " + k.GetName()
	switch k.GetKind() {
	case "ClusterRole", "Role":
		want, got := convert[rbacv1.ClusterRole](t, k), convert[rbacv1.ClusterRole](t, c)
		if !reflect.DeepEqual(got.Rules, want.Rules) {
			t.Errorf("%s: rules\n%v\nkustomize:\n%v", what, got.Rules, want.Rules)
		}
		if !reflect.DeepEqual(got.AggregationRule, want.AggregationRule) {
			t.Errorf("%s: aggregationRule %v; kustomize: %v", what, got.AggregationRule, want.AggregationRule)
		}
	case "ClusterRoleBinding", "RoleBinding":
		want, got := convert[rbacv1.ClusterRoleBinding](t, k), convert[rbacv1.ClusterRoleBinding](t, c)
		if !reflect.DeepEqual(got.RoleRef, want.RoleRef) || !reflect.DeepEqual(got.Subjects, want.Subjects) {
			t.Errorf("%s: roleRef %v subjects %v; config/default: %v %v", what, got.RoleRef, got.Subjects, want.RoleRef, want.Subjects)
		}
	case "Service":
		want, got := convert[corev1.Service](t, k), convert[corev1.Service](t, c)
		if !reflect.DeepEqual(got.Spec.Ports, want.Spec.Ports) {
			t.Errorf("%s: ports %v; config/default: %v", what, got.Spec.Ports, want.Spec.Ports)
		}
		for key, v := range want.Spec.Selector {
			if got.Spec.Selector[key] != v {
				t.Errorf("%s: selector %v lacks %s=%s of config/default", what, got.Spec.Selector, key, v)
			}
		}
	case "CustomResourceDefinition":
		want, got := convert[apiextensionsv1.CustomResourceDefinition](t, k), convert[apiextensionsv1.CustomResourceDefinition](t, c)
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("%s: spec differs from config/default's", what)
		}
	case "Deployment":
		compareDeployment(t, convert[appsv1.Deployment](t, k), convert[appsv1.Deployment](t, c))
	case "ServiceAccount":
	default:
		t.Errorf("%s: no comparison for this kind: add one", what)
	}
}

func compareDeployment(t *testing.T, want, got *appsv1.Deployment) {
	t.Helper()
	if *got.Spec.Replicas != *want.Spec.Replicas {
		t.Errorf("replicas %d; config/default %d", *got.Spec.Replicas, *want.Spec.Replicas)
	}
	for key, v := range want.Spec.Selector.MatchLabels {
		if got.Spec.Selector.MatchLabels[key] != v {
			t.Errorf("selector %v lacks %s=%s of config/default", got.Spec.Selector.MatchLabels, key, v)
		}
	}
	wp, gp := want.Spec.Template.Spec, got.Spec.Template.Spec
	if !reflect.DeepEqual(gp.SecurityContext, wp.SecurityContext) || gp.ServiceAccountName != wp.ServiceAccountName ||
		!reflect.DeepEqual(gp.TerminationGracePeriodSeconds, wp.TerminationGracePeriodSeconds) {
		t.Errorf("pod spec: securityContext %v serviceAccountName %s; config/default: %v %s", gp.SecurityContext, gp.ServiceAccountName, wp.SecurityContext, wp.ServiceAccountName)
	}
	wc, gc := wp.Containers[0], gp.Containers[0]
	if gc.Name != wc.Name || gc.Image != "celaudit:0.1.0" && gc.Image != wc.Image {
		t.Errorf("container %s image %s; config/default: %s %s", gc.Name, gc.Image, wc.Name, wc.Image)
	}
	// By default the chart passes config/default's arguments, no more.
	wantArgs := slices.Clone(wc.Args)
	if gotArgs := gc.Args; !sameSet(gotArgs, wantArgs) {
		t.Errorf("args %v; want %v", gotArgs, wantArgs)
	}
	for field, pair := range map[string][2]any{
		"command":         {gc.Command, wc.Command},
		"env":             {gc.Env, wc.Env},
		"ports":           {gc.Ports, wc.Ports},
		"securityContext": {gc.SecurityContext, wc.SecurityContext},
		"livenessProbe":   {gc.LivenessProbe, wc.LivenessProbe},
		"readinessProbe":  {gc.ReadinessProbe, wc.ReadinessProbe},
		"resources":       {gc.Resources, wc.Resources},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("container %s: %v; config/default: %v", field, pair[0], pair[1])
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestManagerClusterRoleEqualsGenerated(t *testing.T) {
	t.Parallel()
	want := convert[rbacv1.ClusterRole](t, decodeFile(t, "config/rbac/role.yaml").mustFind(t, "ClusterRole", "manager-role")).Rules
	for _, args := range [][]string{nil, {"--set", "reports.api=both,admissionPolicies.manage=false"}} {
		if got := render(t, args...).rules(t, "ClusterRole", "celaudit-manager-role"); !reflect.DeepEqual(got, want) {
			t.Errorf("%v: the chart's manager ClusterRole rules\n%v\nconfig/rbac/role.yaml:\n%v", args, got, want)
		}
	}
}

func TestDashboardConfigMap(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile(filepath.Join(repoRoot, "config", "grafana", "celaudit-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, objs objects, ns string, labels, annotations map[string]string) {
		t.Helper()
		cm := convert[corev1.ConfigMap](t, objs.mustFind(t, "ConfigMap", "celaudit-dashboard"))
		if cm.Namespace != ns {
			t.Errorf("namespace %q; want %q", cm.Namespace, ns)
		}
		for k, v := range labels {
			if cm.Labels[k] != v {
				t.Errorf("label %s=%q; want %q (labels %v)", k, cm.Labels[k], v, cm.Labels)
			}
		}
		for k, v := range annotations {
			if cm.Annotations[k] != v {
				t.Errorf("annotation %s=%q; want %q", k, cm.Annotations[k], v)
			}
		}
		if len(cm.Data) != 1 || cm.Data["celaudit-dashboard.json"] != string(want) {
			t.Errorf("data keys %v: celaudit-dashboard.json differs from config/grafana/celaudit-dashboard.json", slices.Collect(mapKeys(cm.Data)))
		}
	}
	t.Run("default", func(t *testing.T) {
		check(t, render(t), namespace, map[string]string{"grafana_dashboard": "1"}, nil)
	})
	t.Run("namespace, labels and annotations", func(t *testing.T) {
		objs := render(t, "--set", "grafana.dashboard.namespace=monitoring,grafana.dashboard.annotations.grafana_folder=Policies",
			"--set-string", "grafana.dashboard.labels.custom=yes")
		check(t, objs, "monitoring", map[string]string{"grafana_dashboard": "1", "custom": "yes"}, map[string]string{"grafana_folder": "Policies"})
	})
	t.Run("disabled", func(t *testing.T) {
		if render(t, "--set", "grafana.dashboard.enabled=false").find("ConfigMap", "celaudit-dashboard") != nil {
			t.Error("grafana.dashboard.enabled=false rendered the dashboard ConfigMap")
		}
	})
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestReportResults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"default leaves the operator's default", nil, nil},
		{"listPasses lists passes for Policy Reporter", []string{"--set", "policyReporter.listPasses=true"}, []string{listAll}},
		{"listPasses off leaves the operator's default", []string{"--set", "policyReporter.listPasses=false"}, nil},
		{"a list wins over listPasses", []string{"--set", "reports.results={fail,warn},policyReporter.listPasses=true"}, []string{"--report-results=fail,warn"}},
		{"a string wins over listPasses", []string{"--set", "reports.results=fail\\,error"}, []string{"--report-results=fail,error"}},
		{"a string with listPasses off", []string{"--set", "reports.results=fail,policyReporter.listPasses=false"}, []string{"--report-results=fail"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := flag(render(t, tc.args...).args(t), "report-results"); !slices.Equal(got, tc.want) {
				t.Errorf("--report-results arguments %v; want %v", got, tc.want)
			}
		})
	}
}

func TestReportAPI(t *testing.T) {
	t.Parallel()
	openReportsRule := rbacv1.PolicyRule{
		APIGroups: []string{"openreports.io"},
		Resources: []string{"clusterreports", "reports"},
		Verbs:     []string{"create", "delete", "get", "list", "patch", "update", "watch"},
	}
	for _, tc := range []struct {
		api  string
		flag []string
	}{
		{"", nil},
		{"wgpolicy", nil},
		{"openreports", []string{"--report-api=openreports"}},
		{"both", []string{"--report-api=both"}},
	} {
		t.Run("api="+tc.api, func(t *testing.T) {
			var args []string
			if tc.api != "" {
				args = []string{"--set", "reports.api=" + tc.api}
			}
			objs := render(t, args...)
			if got := flag(objs.args(t), "report-api"); !slices.Equal(got, tc.flag) {
				t.Errorf("--report-api arguments %v; want %v", got, tc.flag)
			}
			// The manager ClusterRole grants the openreports.io reports whatever the API: no second role.
			if !slices.ContainsFunc(objs.rules(t, "ClusterRole", "celaudit-manager-role"), func(r rbacv1.PolicyRule) bool {
				return reflect.DeepEqual(r, openReportsRule)
			}) {
				t.Errorf("the manager ClusterRole lacks %v", openReportsRule)
			}
		})
	}
	if _, err := helm(t, "template", release, chartDir, "--set", "reports.api=policyreports"); err == nil ||
		!strings.Contains(err.Error(), "at '/reports/api': value must be one of 'wgpolicy', 'openreports', 'both'") {
		t.Errorf("reports.api=policyreports: %v; want a failure naming the allowed values", err)
	}
}

// checkBinding checks that the binding binds the role to the operator's service account.
func checkBinding(t *testing.T, objs objects, kind, name, role string) {
	t.Helper()
	b := convert[rbacv1.ClusterRoleBinding](t, objs.mustFind(t, kind, name))
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "celaudit-controller-manager", Namespace: namespace}}
	if b.RoleRef.Name != role || !reflect.DeepEqual(b.Subjects, wantSubjects) {
		t.Errorf("%s %s binds %s to %v; want %s to %v", kind, name, b.RoleRef.Name, b.Subjects, role, wantSubjects)
	}
}

func TestAdmissionPolicies(t *testing.T) {
	t.Parallel()
	for _, manage := range []bool{true, false} {
		objs := render(t, "--set", "admissionPolicies.manage="+map[bool]string{true: "true", false: "false"}[manage])
		hasFlag := len(flag(objs.args(t), "manage-admission-policies")) > 0
		role := objs.find("ClusterRole", "celaudit-admission-policy-manager")
		binding := objs.find("ClusterRoleBinding", "celaudit-admission-policy-manager-rolebinding")
		if hasFlag != manage || (role != nil) != manage || (binding != nil) != manage {
			t.Errorf("admissionPolicies.manage=%v: flag %v, ClusterRole %v, binding %v", manage, hasFlag, role != nil, binding != nil)
		}
		if manage {
			checkBinding(t, objs, "ClusterRoleBinding", "celaudit-admission-policy-manager-rolebinding", "celaudit-admission-policy-manager")
		}
	}
}

func TestAdmissionPolicyExemptions(t *testing.T) {
	t.Parallel()
	// None by default: the operator's built-in exemptions stand alone.
	defaults := render(t).args(t)
	for _, name := range []string{"exempt-namespaces", "exempt-resources", "exempt-users", "exempt-groups"} {
		if got := flag(defaults, name); got != nil {
			t.Errorf("default args pass %v", got)
		}
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`admissionPolicies:
  exempt:
    namespaces: [argocd, flux-system]
    resources: [/configmaps, example.com/*]
    users: [break-glass]
    groups: ["system:masters", oncall]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := render(t, "-f", values).args(t)
	for _, want := range []string{"--exempt-namespaces=argocd,flux-system", "--exempt-resources=/configmaps,example.com/*",
		"--exempt-users=break-glass", "--exempt-groups=system:masters,oncall"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	// A name with a comma cannot pass through the comma-separated flag: the install fails, saying so.
	_, err := helm(t, "template", release, chartDir, "--set", `admissionPolicies.exempt.users={CN=a\,OU=b}`)
	if err == nil || !strings.Contains(err.Error(), `admissionPolicies.exempt.users: "CN=a,OU=b" holds a comma`) {
		t.Errorf("a user with a comma: %v, want the install to fail naming the value", err)
	}
}

func TestLeaderElection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  string
		want bool
	}{
		{"replicaCount=1", true},
		{"replicaCount=1,leaderElection.enabled=false", false},
		{"replicaCount=2,leaderElection.enabled=false", true},
	} {
		objs := render(t, "--set", tc.set)
		hasFlag := len(flag(objs.args(t), "leader-elect")) > 0
		role := objs.find("Role", "celaudit-leader-election-role") != nil
		if hasFlag != tc.want || role != tc.want {
			t.Errorf("%s: --leader-elect %v, leader-election Role %v; want %v", tc.set, hasFlag, role, tc.want)
		}
		if tc.want {
			checkBinding(t, objs, "RoleBinding", "celaudit-leader-election-rolebinding", "celaudit-leader-election-role")
		}
	}
}

func TestTuningFlags(t *testing.T) {
	t.Parallel()
	// From a values file, as most installs set them: YAML numbers reach the templates as float64, which
	// print large integers as 2e+06 unless converted.
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`audit:
  workers: 4
  pageSize: 1000
  resyncPeriod: 30m
  excludeCRDGroups: [wgpolicyk8s.io, example.com]
kubeAPI:
  qps: 100.5
  burst: 800
reports:
  maxResultsPerReport: 0
  maxReportBytes: 1500000
leaderElection:
  leaseDuration: 30s
  renewDeadline: 20s
  retryPeriod: 4s
`), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := render(t, "-f", values, "--set", "logLevel=debug,extraArgs={--report-coalesce=2s,--report-workers=4}")
	want := []string{
		"--workers=4", "--page-size=1000", "--resync-period=30m", "--exclude-crd-groups=wgpolicyk8s.io,example.com",
		"--kube-api-qps=100.5", "--kube-api-burst=800", "--max-results-per-report=0", "--max-report-bytes=1500000",
		"--zap-log-level=debug", "--report-coalesce=2s", "--report-workers=4",
		"--leader-election-lease-duration=30s", "--leader-election-renew-deadline=20s", "--leader-election-retry-period=4s",
	}
	args := objs.args(t)
	for _, w := range want {
		if !slices.Contains(args, w) {
			t.Errorf("args %v lack %s", args, w)
		}
	}
	// Unset values pass nothing: the operator's defaults stand.
	defaults := render(t).args(t)
	for _, name := range []string{"workers", "page-size", "resync-period", "exclude-crd-groups", "kube-api-qps", "kube-api-burst",
		"max-results-per-report", "max-report-bytes", "zap-log-level", "leader-election-lease-duration",
		"leader-election-renew-deadline", "leader-election-retry-period"} {
		if got := flag(defaults, name); got != nil {
			t.Errorf("default args pass %v", got)
		}
	}
}

// Secrets are audited only when audit.secrets asks for it: the flag is passed then and only then.
func TestAuditSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, nil},
		{[]string{"--set", "audit.secrets=false"}, nil},
		{[]string{"--set", "audit.secrets=true"}, []string{"--audit-secrets"}},
	} {
		if got := flag(render(t, tc.args...).args(t), "audit-secrets"); !slices.Equal(got, tc.want) {
			t.Errorf("%v: --audit-secrets args %v; want %v", tc.args, got, tc.want)
		}
	}
}

// MutatingAdmissionPolicies are audited unless audit.mutatingPolicies turns it off: the operator's default is on,
// so the flag is passed only to turn it off.
func TestAuditMutatingPolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, nil},
		{[]string{"--set", "audit.mutatingPolicies=true"}, nil},
		{[]string{"--set", "audit.mutatingPolicies=false"}, []string{"--audit-mutating-policies=false"}},
	} {
		if got := flag(render(t, tc.args...).args(t), "audit-mutating-policies"); !slices.Equal(got, tc.want) {
			t.Errorf("%v: --audit-mutating-policies args %v; want %v", tc.args, got, tc.want)
		}
	}
}

func TestDeploymentSettings(t *testing.T) {
	t.Parallel()
	d := render(t, "--set", "image.repository=registry.example.com/celaudit,image.tag=v1.2.3,image.pullPolicy=Always",
		"--set", "nodeSelector.kubernetes\\.io/os=linux,tolerations[0].key=dedicated,tolerations[0].operator=Exists",
		"--set", "resources.limits.memory=1Gi,affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=zone",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists").deployment(t)
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "registry.example.com/celaudit:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s pull policy %s", c.Image, c.ImagePullPolicy)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" {
		t.Errorf("nodeSelector %v tolerations %v", pod.NodeSelector, pod.Tolerations)
	}
	if pod.Affinity == nil || pod.Affinity.NodeAffinity == nil {
		t.Errorf("affinity %v", pod.Affinity)
	}
	if got := c.Resources.Limits.Memory().String(); got != "1Gi" {
		t.Errorf("memory limit %s", got)
	}
}

func TestServiceMonitor(t *testing.T) {
	t.Parallel()
	if objs := render(t); objs.find("ServiceMonitor", "celaudit-controller-manager-metrics-monitor") != nil ||
		objs.find("ClusterRoleBinding", "celaudit-metrics-reader-prometheus") != nil {
		t.Error("the ServiceMonitor or its binding is rendered by default")
	}
	objs := render(t, "--set", "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.labels.release=kps")
	sm := objs.mustFind(t, "ServiceMonitor", "celaudit-controller-manager-metrics-monitor")
	if sm.GetNamespace() != namespace || sm.GetLabels()["release"] != "kps" {
		t.Errorf("ServiceMonitor namespace %q labels %v", sm.GetNamespace(), sm.GetLabels())
	}
	// The endpoint is config/prometheus's: HTTPS with the scraper's token, the metrics Service's port.
	want := decodeFile(t, "config/prometheus/monitor.yaml")[0]
	wantEndpoints, _, _ := unstructured.NestedSlice(want.Object, "spec", "endpoints")
	gotEndpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if !reflect.DeepEqual(gotEndpoints, wantEndpoints) {
		t.Errorf("endpoints %v; config/prometheus: %v", gotEndpoints, wantEndpoints)
	}
	svc := convert[corev1.Service](t, objs.mustFind(t, "Service", "celaudit-controller-manager-metrics-service"))
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %v does not select the metrics Service (labels %v)", selector, svc.Labels)
		}
	}
	b := convert[rbacv1.ClusterRoleBinding](t, objs.mustFind(t, "ClusterRoleBinding", "celaudit-metrics-reader-prometheus"))
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "monitoring"}}
	if b.RoleRef.Name != "celaudit-metrics-reader" || !reflect.DeepEqual(b.Subjects, wantSubjects) {
		t.Errorf("metrics reader binding %v %v", b.RoleRef, b.Subjects)
	}
}

func TestPolicyReportCRDs(t *testing.T) {
	t.Parallel()
	objs := render(t)
	for _, name := range []string{"policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"} {
		crd := objs.mustFind(t, "CustomResourceDefinition", name)
		if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s: annotations %v lack helm.sh/resource-policy: keep", name, crd.GetAnnotations())
		}
	}
	objs = render(t, "--set", "reports.installCRDs=false")
	for _, name := range []string{"policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"} {
		if objs.find("CustomResourceDefinition", name) != nil {
			t.Errorf("reports.installCRDs=false rendered %s", name)
		}
	}
	if objs.find("CustomResourceDefinition", "auditpolicies.audit.celaudit.io") == nil {
		t.Error("reports.installCRDs=false dropped the AuditPolicy CRD")
	}
}
