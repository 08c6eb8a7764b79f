package chart_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// The sharded install's names, written out: the StatefulSet keeps the Deployment's name.
const (
	sharded         = "sharding.enabled=true,replicaCount=3"
	statefulSetName = "celaudit-controller-manager"
	headlessName    = "celaudit-controller-manager-headless"
	memberRole      = "celaudit-shard-member-role"
)

// shardingEnv is what a member reads its identity from (--pod-name and --pod-namespace default to them).
var shardingEnv = []corev1.EnvVar{
	{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
}

func (o objects) statefulSet(t *testing.T) *appsv1.StatefulSet {
	t.Helper()
	return convert[appsv1.StatefulSet](t, o.mustFind(t, "StatefulSet", statefulSetName))
}

// selects reports whether the label selector selects an object with these labels.
func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(l))
}

// TestShardedInstall renders sharding.enabled with three replicas: a StatefulSet instead of the Deployment,
// governed by a headless Service, with the membership's argument and environment, a PodDisruptionBudget and a
// Role that reads only its own StatefulSet.
func TestShardedInstall(t *testing.T) {
	t.Parallel()
	objs := render(t, "--set", sharded+",metrics.serviceMonitor.enabled=true")
	if d := objs.find("Deployment", "celaudit-controller-manager"); d != nil {
		t.Error("sharding.enabled with 3 replicas renders the Deployment too")
	}
	sts := objs.statefulSet(t)
	pod := sts.Spec.Template
	if got := ptr.Deref(sts.Spec.Replicas, 0); got != 3 {
		t.Errorf("replicas %d; want 3", got)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q; want Parallel", sts.Spec.PodManagementPolicy)
	}
	if !selects(t, sts.Spec.Selector, pod.Labels) {
		t.Errorf("the StatefulSet's selector %v does not select its pods (labels %v)", sts.Spec.Selector, pod.Labels)
	}

	t.Run("headless Service", func(t *testing.T) {
		if sts.Spec.ServiceName != headlessName {
			t.Fatalf("serviceName %q; want %q", sts.Spec.ServiceName, headlessName)
		}
		svc := convert[corev1.Service](t, objs.mustFind(t, "Service", headlessName))
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("clusterIP %q; want None", svc.Spec.ClusterIP)
		}
		if !selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, pod.Labels) {
			t.Errorf("selector %v does not select the members (labels %v)", svc.Spec.Selector, pod.Labels)
		}
		metrics := convert[corev1.Service](t, objs.mustFind(t, "Service", "celaudit-controller-manager-metrics-service"))
		if !reflect.DeepEqual(svc.Spec.Ports, metrics.Spec.Ports) {
			t.Errorf("ports %v; the metrics Service's %v", svc.Spec.Ports, metrics.Spec.Ports)
		}
		// Both Services carry the chart's labels: the ServiceMonitor must pick the metrics Service only, or
		// every member is scraped twice.
		sm := objs.mustFind(t, "ServiceMonitor", "celaudit-controller-manager-metrics-monitor")
		raw, _, _ := unstructured.NestedMap(sm.Object, "spec", "selector")
		sel := convert[metav1.LabelSelector](t, &unstructured.Unstructured{Object: raw})
		if !selects(t, sel, metrics.Labels) || selects(t, sel, svc.Labels) {
			t.Errorf("ServiceMonitor selector %v: selects the metrics Service %v, the headless Service %v; want only the former",
				sel, selects(t, sel, metrics.Labels), selects(t, sel, svc.Labels))
		}
	})

	t.Run("membership argument and environment", func(t *testing.T) {
		c := pod.Spec.Containers[0]
		if got, want := flag(c.Args, "shard-statefulset"), []string{"--shard-statefulset=" + statefulSetName}; !slices.Equal(got, want) {
			t.Errorf("--shard-statefulset arguments %v; want %v (the StatefulSet's own name)", got, want)
		}
		// The leader computes the cluster-wide rollups.
		if !slices.Contains(c.Args, "--leader-elect") || objs.find("Role", "celaudit-leader-election-role") == nil {
			t.Errorf("leader election is off: args %v", c.Args)
		}
		for _, want := range shardingEnv {
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return reflect.DeepEqual(e, want) }) {
				t.Errorf("env %v lacks %v", c.Env, want)
			}
		}
	})

	t.Run("PodDisruptionBudget", func(t *testing.T) {
		pdb := convert[policyv1.PodDisruptionBudget](t, objs.mustFind(t, "PodDisruptionBudget", statefulSetName))
		if want := intstr.FromInt32(1); pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != want || pdb.Spec.MinAvailable != nil {
			t.Errorf("maxUnavailable %v minAvailable %v; want 1 and none", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
		}
		if !selects(t, pdb.Spec.Selector, pod.Labels) {
			t.Errorf("selector %v does not select the members", pdb.Spec.Selector)
		}
		if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
			t.Errorf("unhealthyPodEvictionPolicy %v; want AlwaysAllow, so that a crash-looping member never blocks a drain", p)
		}
		percent := render(t, "--set", sharded, "--set-string", "sharding.podDisruptionBudget.maxUnavailable=25%")
		pdb = convert[policyv1.PodDisruptionBudget](t, percent.mustFind(t, "PodDisruptionBudget", statefulSetName))
		if want := intstr.FromString("25%"); pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != want {
			t.Errorf("maxUnavailable %v; want 25%%", pdb.Spec.MaxUnavailable)
		}
	})

	t.Run("Role", func(t *testing.T) {
		role := convert[rbacv1.Role](t, objs.mustFind(t, "Role", memberRole))
		if role.Namespace != namespace {
			t.Errorf("namespace %q; want %q", role.Namespace, namespace)
		}
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, ResourceNames: []string{statefulSetName}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"audit.celaudit.io"}, Resources: []string{"auditshards"}, Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}},
			{APIGroups: []string{"audit.celaudit.io"}, Resources: []string{"auditshards/status"}, Verbs: []string{"get", "patch", "update"}},
		}
		if !reflect.DeepEqual(role.Rules, want) {
			t.Errorf("rules\n%v\nwant\n%v", role.Rules, want)
		}
		binding := convert[rbacv1.RoleBinding](t, objs.mustFind(t, "RoleBinding", "celaudit-shard-member-rolebinding"))
		wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "celaudit-controller-manager", Namespace: namespace}}
		if binding.Namespace != namespace || binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: memberRole}) ||
			!reflect.DeepEqual(binding.Subjects, wantSubjects) {
			t.Errorf("RoleBinding in %q binds %v to %v", binding.Namespace, binding.RoleRef, binding.Subjects)
		}
	})
}

// TestShardedPodTemplateEqualsDeployment holds the StatefulSet's pod template to the Deployment's, under
// several value combinations: they differ only in the membership's argument and environment.
func TestShardedPodTemplateEqualsDeployment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"every pod setting", []string{
			"--set", "image.repository=registry.example.com/celaudit,image.tag=v1.2.3,imagePullSecrets[0].name=regcred",
			"--set", "podAnnotations.a=b,podLabels.c=d,priorityClassName=system-cluster-critical,nodeSelector.kubernetes\\.io/os=linux",
			"--set", "tolerations[0].key=dedicated,tolerations[0].operator=Exists,resources.limits.memory=2Gi",
			"--set", "extraEnv[0].name=GODEBUG,extraEnv[0].value=x509sha1=0,extraArgs={--report-coalesce=2s}",
			"--set", "reports.api=both,audit.workers=4,logLevel=debug,admissionPolicies.exempt.namespaces={argocd}",
			"--set", "leaderElection.leaseDuration=30s,serviceAccount.create=false,serviceAccount.name=celaudit",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			deployment := render(t, append(slices.Clone(tc.args), "--set", "replicaCount=3")...).deployment(t).Spec.Template
			sts := render(t, append(slices.Clone(tc.args), "--set", sharded)...).statefulSet(t).Spec.Template
			c := &sts.Spec.Containers[0]
			args := slices.DeleteFunc(slices.Clone(c.Args), func(a string) bool { return a == "--shard-statefulset="+statefulSetName })
			if len(args) != len(c.Args)-1 {
				t.Errorf("the StatefulSet's args %v: want one --shard-statefulset=%s", c.Args, statefulSetName)
			}
			env := slices.DeleteFunc(slices.Clone(c.Env), func(e corev1.EnvVar) bool {
				return slices.ContainsFunc(shardingEnv, func(s corev1.EnvVar) bool { return reflect.DeepEqual(e, s) })
			})
			if len(env) != len(c.Env)-len(shardingEnv) {
				t.Errorf("the StatefulSet's env %v: want %v once each", c.Env, shardingEnv)
			}
			c.Args, c.Env = args, env
			if !reflect.DeepEqual(sts, deployment) {
				t.Errorf("apart from the membership, the StatefulSet's pod template\n%+v\ndiffers from the Deployment's\n%+v", sts, deployment)
			}
		})
	}
}

// TestShardingNeedsReplicas checks that sharding changes nothing unless it has more than one replica to
// spread over: the sharding values alone, or with one replica, render byte for byte what the defaults do.
func TestShardingNeedsReplicas(t *testing.T) {
	t.Parallel()
	template := []string{"template", release, chartDir, "--namespace", namespace, "--include-crds"}
	want := mustHelm(t, template...)
	for _, set := range []string{
		"sharding.enabled=true",
		"sharding.enabled=true,replicaCount=1",
		"sharding.enabled=false,sharding.podDisruptionBudget.maxUnavailable=2",
	} {
		if got := mustHelm(t, append(slices.Clone(template), "--set", set)...); got != want {
			t.Errorf("--set %s renders other manifests than the defaults", set)
		}
	}
	// Without sharding, replicas beyond one stay leader-elected standbys of the Deployment.
	objs := render(t, "--set", "replicaCount=3")
	for _, kind := range []string{"StatefulSet", "PodDisruptionBudget"} {
		if objs.find(kind, statefulSetName) != nil {
			t.Errorf("replicaCount=3 without sharding renders a %s", kind)
		}
	}
	if objs.find("Role", memberRole) != nil || objs.find("Service", headlessName) != nil {
		t.Error("replicaCount=3 without sharding renders the member Role or the headless Service")
	}
	if flag(objs.args(t), "shard-statefulset") != nil {
		t.Errorf("replicaCount=3 without sharding passes %v", flag(objs.args(t), "shard-statefulset"))
	}
}

// TestShardMemberRole checks on a real API server what the chart's member Role allows, alone (bound to a user
// that nothing else grants anything): get, list and watch its own StatefulSet — list and watch only with the
// field selector metadata.name that resourceNames requires — and nothing on any other StatefulSet. Then, as
// the chart's ServiceAccount with all the RBAC the sharded chart renders, what a member does: read its
// StatefulSet the way the membership watch does and write AuditShards.
func TestShardMemberRole(t *testing.T) {
	t.Parallel()
	env := envtestutil.StartForTest(t)
	ctx := context.Background()
	inst := env.ChartIdentity(t, "--set", sharded)
	if !slices.Contains(inst.Args, "--shard-statefulset="+statefulSetName) {
		t.Fatalf("args %v lack --shard-statefulset=%s", inst.Args, statefulSetName)
	}
	for _, name := range []string{statefulSetName, "other"} {
		must(t, env.Client.Create(ctx, minimalStatefulSet(name)))
	}
	own := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", statefulSetName).String()}
	readOwn := func(t *testing.T, cs kubernetes.Interface) {
		t.Helper()
		sts := cs.AppsV1().StatefulSets(namespace)
		if _, err := sts.Get(ctx, statefulSetName, metav1.GetOptions{}); err != nil {
			t.Errorf("get its own StatefulSet: %v", err)
		}
		if list, err := sts.List(ctx, own); err != nil || len(list.Items) != 1 || list.Items[0].Name != statefulSetName {
			t.Errorf("list its own StatefulSet by metadata.name: %v, %v", err, list)
		}
		if w, err := sts.Watch(ctx, own); err != nil {
			t.Errorf("watch its own StatefulSet by metadata.name: %v", err)
		} else {
			w.Stop()
		}
	}

	t.Run("the Role alone", func(t *testing.T) {
		const user = "shard-member-role-only"
		role := render(t, "--set", sharded).mustFind(t, "Role", memberRole)
		must(t, envtestutil.Apply(ctx, env.Client, role))
		must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: memberRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		}))
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// RBAC grants are not visible at once: wait until the binding takes effect.
		envtestutil.Eventually(t, 30*time.Second, func() error {
			_, err := cs.AppsV1().StatefulSets(namespace).Get(ctx, statefulSetName, metav1.GetOptions{})
			return err
		})
		readOwn(t, cs)
		sts := cs.AppsV1().StatefulSets(namespace)
		if _, err := sts.Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("get another StatefulSet: %v; want Forbidden", err)
		}
		if _, err := sts.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list every StatefulSet: %v; want Forbidden", err)
		}
		if _, err := sts.Watch(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("watch every StatefulSet: %v; want Forbidden", err)
		}
		if _, err := cs.AppsV1().StatefulSets("default").Get(ctx, statefulSetName, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("get a StatefulSet of that name in another namespace: %v; want Forbidden", err)
		}
	})

	t.Run("the chart's ServiceAccount", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(inst.Config)
		if err != nil {
			t.Fatal(err)
		}
		readOwn(t, cs)
		// Members publish their summaries in AuditShards of the release namespace (the CRD comes with the
		// operator: a SubjectAccessReview asks without it).
		for _, attrs := range []authorizationv1.ResourceAttributes{
			{Namespace: namespace, Verb: "create", Group: "audit.celaudit.io", Resource: "auditshards"},
			{Namespace: namespace, Verb: "update", Group: "audit.celaudit.io", Resource: "auditshards", Subresource: "status"},
		} {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               inst.Username(),
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + inst.Namespace, "system:authenticated"},
				ResourceAttributes: &attrs,
			}}
			must(t, env.Client.Create(ctx, review))
			if !review.Status.Allowed {
				t.Errorf("%s may not %s auditshards/%s in %s", inst.Identity, attrs.Verb, attrs.Subresource, namespace)
			}
		}
	})
}

// minimalStatefulSet is a StatefulSet of one pod in the chart's namespace (envtest runs no controller: no pod
// is ever created).
func minimalStatefulSet(name string) *appsv1.StatefulSet {
	l := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "celaudit"}}},
			},
		},
	}
}
