package sharding

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	auditv1alpha1 "github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/shard"
	"github.com/celaudit/celaudit/test/envtestutil"
)

const (
	// namespaceCount namespaces hold the audited objects: enough that every member of 2, 3 or 4 owns some.
	namespaceCount = 30
	// set is the StatefulSet whose pods are the members.
	set = "celaudit"
	// label marks the scenario's namespaces, which the policies select.
	label = "sharding-test"
	group = "sharding.celaudit.test"
	// auditPolicy requires an owner of the ConfigMaps of the scenario's namespaces: the leader writes its
	// status from every member's AuditShard.
	auditPolicy = "sh-ap"
	// resultsPerNamespace are a ConfigMap passing and one failing, of the VAP and of the AuditPolicy, a widget
	// and the namespace; and the AuditPolicy itself is judged by its CRD's rules.
	resultsPerNamespace = 6
	wantResults         = resultsPerNamespace*namespaceCount + 1
	// topNamespaces is how many namespaces an AuditPolicy's status lists, most violations first.
	topNamespaces = 10
)

// TestShardedAudit runs the scenario with the API server filtering each member's LIST and WATCH.
func TestShardedAudit(t *testing.T) {
	runScenario(t, true)
}

// TestShardedAuditClientSide runs the scenario against an API server without ShardedListAndWatch: each
// member receives every object and keeps those of its range.
func TestShardedAuditClientSide(t *testing.T) {
	runScenario(t, false)
}

// cluster is a control plane holding the scenario's fixtures, and celaudit's shipped identity.
type cluster struct {
	env        *envtestutil.Env
	id         envtestutil.Identity
	namespaces []string
	members    map[string]*member
	// gone are the members stopped or killed, whose recorded requests still count.
	gone []*member
}

func runScenario(t *testing.T, serverSide bool) {
	c := newCluster(t, serverSide)
	// The results of one unsharded replica, which the members' union must equal at every step, and the
	// AuditPolicy's status it writes, which the leader's rollup of the members' AuditShards must equal.
	want, ref := c.freshResults(t)
	if len(want) != wantResults {
		t.Fatalf("the unsharded audit wrote %d results, want %d (ConfigMaps passing and failing, of the VAP and of the "+
			"AuditPolicy, a widget and the namespace in each of %d namespaces, and the AuditPolicy):\n%s", len(want), wantResults,
			namespaceCount, strings.Join(want, "\n"))
	}
	// One violation (the unowned ConfigMap) in every namespace: the first namespaces by name lead.
	if ref.Matched != 2*namespaceCount || ref.Violations != namespaceCount || !slices.Equal(ref.Top, topOf(c.namespaces, nil)) {
		t.Fatalf("the unsharded celaudit's AuditPolicy status %+v, want %d matched, %d violations, top namespaces %v",
			ref, 2*namespaceCount, namespaceCount, topOf(c.namespaces, nil))
	}

	gen := c.scale(t, 3)
	c.start(t, 0, 1, 2)
	c.waitUnion(t, want, gen, 3)
	c.waitPolicyStatus(t, ref)

	// Scale down: the StatefulSet controller deletes the highest ordinal; its namespaces move to the others.
	gen = c.scale(t, 2)
	c.stop(t, 2)
	c.waitUnion(t, want, gen, 2)
	c.waitPolicyStatus(t, ref)
	// The AuditShard of the member scaled away is still there, of an earlier epoch: it did not count.
	c.expectStaleShard(t, 2, gen)

	// Scale up: two new pods; every member's range changes.
	gen = c.scale(t, 4)
	c.start(t, 2, 3)
	c.waitUnion(t, want, gen, 4)
	c.waitPolicyStatus(t, ref)

	// A member killed: what changes in its namespaces meanwhile is audited once it is back.
	victim := 1
	ns := c.ownedBy(t, victim, 4)
	c.members[memberName(victim)].signal(t, syscall.SIGKILL)
	c.members[memberName(victim)].waitExit(t, 30*time.Second)
	c.gone = append(c.gone, c.members[memberName(victim)])
	c.create(t, configMap(ns, "late", nil))
	c.start(t, victim)
	c.waitResult(t, ns, "late", v1alpha2.StatusWarn) // an Audit binding warns
	// The AuditPolicy counts one more ConfigMap and one more violation, which puts its namespace first.
	late := ref
	late.Matched, late.Violations, late.Top = ref.Matched+1, ref.Violations+1, topOf(c.namespaces, map[string]int64{ns: 2})
	if ref.Warn > 0 {
		late.Warn++
	} else {
		late.Fail++
	}
	// New counts, which only a complete rollup of the members at the current epoch writes; no new generation:
	// the leader that took over from the killed one must write the counts it adds up.
	c.waitLateStatus(t, late)

	for i := range 4 {
		c.stop(t, i)
	}
	c.assertSingleWriter(t)
	c.assertLeaderWrotePolicies(t)
	c.assertReadMode(t, serverSide)
	// The reports, the change made while a member was dead included, equal a fresh audit of the final state.
	opts := envtestutil.TestOptions()
	opts.ReportVerdicts = "pass,fail,warn,error,skip"
	envtestutil.AssertFreshAuditAgrees(t, c.env.Client, c.id.Config, opts)
}

// newCluster starts a control plane of the test's own, with or without the ShardedListAndWatch gate, holding
// the scenario's namespaces, objects and policies, and the members' StatefulSet.
func newCluster(t *testing.T, serverSide bool) *cluster {
	t.Helper()
	env, err := envtestutil.StartWith(func(te *envtest.Environment) {
		te.ControlPlane.GetAPIServer().Configure().Set("feature-gates", fmt.Sprintf("ShardedListAndWatch=%t", serverSide))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping the control plane: %v", err)
		}
	})
	c := &cluster{env: env, members: map[string]*member{}}
	c.id = env.ShippedIdentity(t)

	// The CRD first without its rule, so that stored widgets can break it.
	crd := widgetCRD(nil)
	c.create(t, crd)
	if err := envtestutil.WaitEstablished(context.Background(), env.Client, crd.Name); err != nil {
		t.Fatal(err)
	}
	for i := range namespaceCount {
		// The number first: FNV-1a mixes a name's last characters into the high bits, which pick the range, only
		// weakly, so that names differing only in a suffix (sh-00, sh-01...) all land in one range.
		ns := fmt.Sprintf("%02d-sh", i)
		c.namespaces = append(c.namespaces, ns)
		c.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "yes"}}})
		c.create(t, configMap(ns, "owned", map[string]string{"owner": "team"}))
		c.create(t, configMap(ns, "unowned", nil))
		c.createWidget(t, ns, "w", int64(5+10*(i%2))) // every other one too large
	}
	envtestutil.Eventually(t, time.Minute, func() error {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: crd.Name}, got); err != nil {
			return err
		}
		got.Spec = widgetCRD([]apiextensionsv1.ValidationRule{{Rule: "self.size <= 10", Message: "too large"}}).Spec
		return env.Client.Update(context.Background(), got)
	})
	// A VAP on ConfigMaps, and one on the Namespaces themselves: cluster-scoped objects, whose
	// ClusterPolicyReport the owner of the hash of "" writes.
	for _, p := range []struct{ name, resource, expression string }{
		{"sh-owner", "configmaps", "has(object.data) && 'owner' in object.data"},
		{"sh-team", "namespaces", "has(object.metadata.labels) && 'team' in object.metadata.labels"},
	} {
		c.create(t, &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{p.resource}},
					},
				}}},
				Validations: []admissionregistrationv1.Validation{{Expression: p.expression, Message: p.name + " failed"}},
			},
		})
		match := &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}}}
		if p.resource == "namespaces" {
			match = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}}}
		}
		c.create(t, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: p.name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
				MatchResources: match,
			},
		})
	}
	c.create(t, &auditv1alpha1.AuditPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: auditPolicy},
		Spec: auditv1alpha1.AuditPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}}},
			Validations:    []admissionregistrationv1.Validation{{Expression: "has(object.data) && 'owner' in object.data", Message: "every ConfigMap needs an owner"}},
		},
	})
	c.create(t, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.id.Namespace, Name: set},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": set}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": set}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "celaudit"}}},
			},
		},
	})
	return c
}

func widgetCRD(rules []apiextensionsv1.ValidationRule) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget", ListKind: "WidgetList", Singular: "widget"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}, XValidations: rules},
					},
				}},
			}},
		},
	}
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func (c *cluster) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := c.env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func (c *cluster) createWidget(t *testing.T, ns, name string, size int64) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"size": size},
	}}
	envtestutil.Eventually(t, 30*time.Second, func() error { return c.env.Client.Create(context.Background(), u) })
}

// freshResults runs one unsharded replica until it has written its reports and the AuditPolicy's status,
// and returns their results and that status, then deletes the reports: the members start from none.
func (c *cluster) freshResults(t *testing.T) ([]string, policyStatus) {
	t.Helper()
	opts := envtestutil.TestOptions()
	opts.ReportVerdicts = "pass,fail,warn,error,skip"
	op, stop := envtestutil.StartOperator(t, c.id.Config, opts)
	envtestutil.WaitSettled(t, op)
	var want []string
	envtestutil.Eventually(t, time.Minute, func() error {
		var err error
		if want, err = c.results(); err != nil {
			return err
		}
		if len(want) < wantResults {
			return fmt.Errorf("%d results written", len(want))
		}
		return nil
	})
	var ref policyStatus
	envtestutil.Eventually(t, time.Minute, func() error {
		ap, err := c.policy()
		if err != nil {
			return err
		}
		if ap.Status.LastAuditTime == nil || ap.Status.ObservedGeneration != ap.Generation || ap.Status.Matched < 2*namespaceCount {
			return fmt.Errorf("AuditPolicy %s not audited yet: %+v", auditPolicy, ap.Status)
		}
		ref = statusOf(ap)
		return nil
	})
	stop()
	ctx := context.Background()
	if err := c.env.Client.DeleteAllOf(ctx, &v1alpha2.ClusterPolicyReport{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range c.namespaces {
		if err := c.env.Client.DeleteAllOf(ctx, &v1alpha2.PolicyReport{}, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	return want, ref
}

// results returns the results of the scenario's reports: its namespaces' and the cluster's.
func (c *cluster) results() ([]string, error) {
	return envtestutil.ReportResults(context.Background(), c.env.Client, c.namespaces...)
}

// scale sets the StatefulSet's replicas, as kubectl scale does, and returns its new generation: the epoch of
// the layout that follows.
func (c *cluster) scale(t *testing.T, replicas int32) int64 {
	t.Helper()
	s := &appsv1.StatefulSet{}
	envtestutil.Eventually(t, 30*time.Second, func() error {
		if err := c.env.Client.Get(context.Background(), client.ObjectKey{Namespace: c.id.Namespace, Name: set}, s); err != nil {
			return err
		}
		s.Spec.Replicas = ptr.To(replicas)
		return c.env.Client.Update(context.Background(), s)
	})
	return s.Generation
}

func memberName(ordinal int) string { return fmt.Sprintf("%s-%d", set, ordinal) }

func (c *cluster) start(t *testing.T, ordinals ...int) {
	t.Helper()
	for _, i := range ordinals {
		c.members[memberName(i)] = startMember(t, c.env, c.id, set, memberName(i))
	}
}

func (c *cluster) stop(t *testing.T, ordinal int) {
	t.Helper()
	m := c.members[memberName(ordinal)]
	m.stop(t)
	c.gone = append(c.gone, m)
	delete(c.members, memberName(ordinal))
}

// ownedBy returns a scenario namespace the member with ordinal owns among count members.
func (c *cluster) ownedBy(t *testing.T, ordinal, count int) string {
	t.Helper()
	for _, ns := range c.namespaces {
		if (shard.Layout{Index: ordinal, Count: count}).OwnsNamespace(ns) {
			return ns
		}
	}
	t.Fatalf("member %d of %d owns none of the scenario's namespaces", ordinal, count)
	return ""
}

// waitUnion waits until the members' reports hold, together, exactly want, and every report was written
// under the layout of epoch among count members by the member owning its namespace: no report is left from
// an earlier layout, none is written twice.
func (c *cluster) waitUnion(t *testing.T, want []string, epoch int64, count int) {
	t.Helper()
	envtestutil.Eventually(t, 90*time.Second, func() error {
		got, err := c.results()
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("the members' reports hold %d results, want %d:\n%s", len(got), len(want), diff(got, want))
		}
		return c.reportsAt(epoch, count)
	})
}

// reportsAt checks that every report of the scenario carries epoch and the index, among count, of the
// member owning its namespace.
func (c *cluster) reportsAt(epoch int64, count int) error {
	ctx := context.Background()
	var metas []metav1.ObjectMeta
	var reports v1alpha2.PolicyReportList
	if err := c.env.Client.List(ctx, &reports); err != nil {
		return err
	}
	for _, r := range reports.Items {
		if slices.Contains(c.namespaces, r.Namespace) {
			metas = append(metas, r.ObjectMeta)
		}
	}
	var cluster v1alpha2.ClusterPolicyReportList
	if err := c.env.Client.List(ctx, &cluster); err != nil {
		return err
	}
	for _, r := range cluster.Items {
		metas = append(metas, r.ObjectMeta)
	}
	for _, m := range metas {
		owner := -1
		for i := range count {
			if (shard.Layout{Index: i, Count: count}).OwnsNamespace(m.Namespace) {
				owner = i
			}
		}
		if got, want := m.Annotations[shard.EpochAnnotation]+" "+m.Annotations[shard.MemberAnnotation],
			fmt.Sprintf("%d %d/%d", epoch, owner, count); got != want {
			return fmt.Errorf("report %s/%s has epoch and shard %q, want %q", m.Namespace, m.Name, got, want)
		}
	}
	return nil
}

// waitResult waits until a report of ns lists result for the ConfigMap name.
func (c *cluster) waitResult(t *testing.T, ns, name string, result v1alpha2.PolicyResult) {
	t.Helper()
	envtestutil.Eventually(t, 90*time.Second, func() error {
		var reports v1alpha2.PolicyReportList
		if err := c.env.Client.List(context.Background(), &reports, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, r := range reports.Items {
			for _, res := range r.Results {
				if len(res.Resources) == 1 && res.Resources[0].Kind == "ConfigMap" && res.Resources[0].Name == name && res.Result == result {
					return nil
				}
			}
		}
		return fmt.Errorf("no %s result for ConfigMap %s/%s yet", result, ns, name)
	})
}

// assertSingleWriter checks, from every member's recorded writes in the API server's order (the revision
// each write got), that each report's writers only moved forward in epoch, that within an epoch one member
// wrote it, and that each wrote only reports of namespaces it owned under the layout it wrote with.
func (c *cluster) assertSingleWriter(t *testing.T) {
	t.Helper()
	var writes []call
	for _, m := range c.all() {
		own := m.recorded(func(x call) bool { return x.reportWrite() && x.ok() })
		// A deletion carries no annotations: it was made under the member's layout of its last write before.
		var (
			last      int64 = -1
			lastShard string
		)
		for i := range own {
			if own[i].Verb == "delete" {
				own[i].Epoch, own[i].Shard = last, lastShard
			} else {
				last, lastShard = own[i].Epoch, own[i].Shard
			}
		}
		writes = append(writes, own...)
	}
	if len(writes) == 0 {
		t.Fatal("no member wrote a report")
	}
	for _, w := range writes {
		if w.Revision == 0 {
			t.Errorf("a write the API server's order cannot place (a deletion without a precondition?): %s", w)
		}
	}
	// By revision; a deletion after the write whose revision its precondition names.
	sort.SliceStable(writes, func(i, j int) bool {
		if writes[i].Revision != writes[j].Revision {
			return writes[i].Revision < writes[j].Revision
		}
		return writes[i].Verb != "delete" && writes[j].Verb == "delete"
	})
	type report struct{ namespace, name string }
	lastEpoch := map[report]int64{}
	writers := map[report]map[int64]string{}
	members := map[string]bool{}
	for _, w := range writes {
		members[w.Member] = true
		key := report{w.Namespace, w.Name}
		var index, count int
		if _, err := fmt.Sscanf(w.Shard, "%d/%d", &index, &count); err != nil || w.Epoch < 0 {
			t.Errorf("a report was written without its shard annotations, or deleted before any: %s", w)
			continue
		}
		if memberName(index) != w.Member || !(shard.Layout{Index: index, Count: count}).OwnsNamespace(w.Namespace) {
			t.Errorf("a member wrote a report of a namespace it does not own: %s", w)
		}
		if prev, ok := lastEpoch[key]; ok && w.Epoch < prev {
			t.Errorf("report %s/%s went back from epoch %d to %d: %s", w.Namespace, w.Name, prev, w.Epoch, w)
		}
		lastEpoch[key] = max(lastEpoch[key], w.Epoch)
		if writers[key] == nil {
			writers[key] = map[int64]string{}
		}
		if other, ok := writers[key][w.Epoch]; ok && other != w.Member {
			t.Errorf("report %s/%s had two writers in epoch %d: %s and %s", w.Namespace, w.Name, w.Epoch, other, w.Member)
		}
		writers[key][w.Epoch] = w.Member
	}
	if len(members) < 4 {
		t.Errorf("only members %v wrote reports: the check saw too little to mean anything", members)
	}
	t.Logf("%d report writes by %d members checked", len(writes), len(members))
}

// assertReadMode checks from the recorded LISTs that each member sent its range as a shardSelector, and that
// the API server applied it exactly when it has the gate.
func (c *cluster) assertReadMode(t *testing.T, serverSide bool) {
	t.Helper()
	for _, m := range c.all() {
		// The built-in kinds: a kube-apiserver 1.37 with the gate applies the selector to those only, and
		// answers a LIST of custom resources (widgets, AuditPolicies) without shardInfo, which the members
		// then filter themselves, as the union's equality shows.
		lists := m.recorded(func(x call) bool {
			return x.Verb == "list" && x.ShardSelector != "" && x.ok() && slices.Contains([]string{"configmaps", "namespaces"}, x.Resource)
		})
		if len(lists) == 0 {
			t.Errorf("member %s sent no LIST with a shardSelector", m.name)
			continue
		}
		for _, l := range lists {
			if l.ShardInfo != serverSide {
				t.Errorf("member %s: LIST %s answered with shardInfo %v, want %v", m.name, l.Path, l.ShardInfo, serverSide)
				break
			}
			// Each member owns four ranges of the hash, one shardRange each, which the API server echoes as
			// sent: the member then takes the list as filtered (scan's shardPage compares the two strings).
			if n := strings.Count(l.ShardSelector, "shardRange(object.metadata.namespace, "); n != 4 || strings.Count(l.ShardSelector, " || ") != 3 {
				t.Errorf("member %s: LIST %s sent shardSelector %q, want four ranges of the namespace hash", m.name, l.Path, l.ShardSelector)
				break
			}
			if serverSide && l.Echoed != l.ShardSelector {
				t.Errorf("member %s: LIST %s sent shardSelector %q, the API server echoed %q", m.name, l.Path, l.ShardSelector, l.Echoed)
				break
			}
		}
	}
}

// all returns every member started, running or not.
func (c *cluster) all() []*member {
	out := slices.Clone(c.gone)
	for _, m := range c.members {
		out = append(out, m)
	}
	return out
}

// diff lists the lines only one side has; both are sorted.
func diff(got, want []string) string {
	var b strings.Builder
	for _, l := range got {
		if !slices.Contains(want, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	if b.Len() == 0 {
		return "(the same lines, some more often)"
	}
	return b.String()
}

// policyStatus is what an AuditPolicy's status says of its audit: counts, top namespaces and SafeToEnforce.
type policyStatus struct {
	Matched, Pass, Fail, Warn, Error, Skip, Violations int64
	Top                                                []auditv1alpha1.NamespaceViolations
	// SafeToEnforce is the condition's status and reason.
	SafeToEnforce string
}

func statusOf(ap *auditv1alpha1.AuditPolicy) policyStatus {
	st := ap.Status
	p := policyStatus{Matched: st.Matched, Pass: st.Pass, Fail: st.Fail, Warn: st.Warn, Error: st.Error, Skip: st.Skip,
		Violations: st.Violations, Top: st.TopNamespaces}
	if cond := meta.FindStatusCondition(st.Conditions, auditv1alpha1.ConditionSafeToEnforce); cond != nil {
		p.SafeToEnforce = string(cond.Status) + " " + cond.Reason
	}
	return p
}

func (p policyStatus) equal(o policyStatus) bool {
	sameTop := slices.Equal(p.Top, o.Top)
	p.Top, o.Top = nil, nil
	return sameTop && reflect.DeepEqual(p, o)
}

// topOf returns the top namespaces of an AuditPolicy's status over namespaces with one violation each but
// those given: most violations first, then by name.
func topOf(namespaces []string, violations map[string]int64) []auditv1alpha1.NamespaceViolations {
	var out []auditv1alpha1.NamespaceViolations
	for _, ns := range namespaces {
		n, ok := violations[ns]
		if !ok {
			n = 1
		}
		out = append(out, auditv1alpha1.NamespaceViolations{Namespace: ns, Violations: n})
	}
	slices.SortFunc(out, func(a, b auditv1alpha1.NamespaceViolations) int {
		if a.Violations != b.Violations {
			return int(b.Violations - a.Violations)
		}
		return strings.Compare(a.Namespace, b.Namespace)
	})
	return out[:min(topNamespaces, len(out))]
}

func (c *cluster) policy() (*auditv1alpha1.AuditPolicy, error) {
	ap := &auditv1alpha1.AuditPolicy{}
	return ap, c.env.Client.Get(context.Background(), client.ObjectKey{Name: auditPolicy}, ap)
}

// waitPolicyStatus gives the AuditPolicy a new generation, which changes none of its results (the duration of
// a promotion its violations never allow), and waits until its status is want at that generation: counts
// and SafeToEnforce of a complete audit of the new generation, which the leader claims only from AuditShards
// of the current layout that cover every namespace; not a status left from before.
func (c *cluster) waitPolicyStatus(t *testing.T, want policyStatus) {
	t.Helper()
	c.waitLeader(t)
	var generation int64
	envtestutil.Eventually(t, 30*time.Second, func() error {
		ap, err := c.policy()
		if err != nil {
			return err
		}
		ap.Spec.Promotion = &auditv1alpha1.Promotion{To: auditv1alpha1.Warn, For: metav1.Duration{Duration: time.Duration(ap.Generation+1) * time.Hour}}
		if err := c.env.Client.Update(context.Background(), ap); err != nil {
			return err
		}
		generation = ap.Generation
		return nil
	})
	envtestutil.Eventually(t, 2*time.Minute, func() error {
		ap, err := c.policy()
		if err != nil {
			return err
		}
		safe := meta.FindStatusCondition(ap.Status.Conditions, auditv1alpha1.ConditionSafeToEnforce)
		if ap.Generation != generation || ap.Status.ObservedGeneration != generation || safe == nil || safe.ObservedGeneration != generation {
			return fmt.Errorf("AuditPolicy %s at generation %d (waiting for %d), status of %d, SafeToEnforce %+v", auditPolicy,
				ap.Generation, generation, ap.Status.ObservedGeneration, safe)
		}
		if got := statusOf(ap); !got.equal(want) {
			return fmt.Errorf("AuditPolicy %s status\n got %+v\nwant %+v", auditPolicy, got, want)
		}
		return nil
	})
}

// waitLateStatus waits until the AuditPolicy's status is want. On failure it logs the AuditShards the
// leader adds up.
func (c *cluster) waitLateStatus(t *testing.T, want policyStatus) {
	t.Helper()
	defer func() {
		if t.Failed() {
			c.logShards(t)
		}
	}()
	envtestutil.Eventually(t, 2*time.Minute, func() error {
		ap, err := c.policy()
		if err != nil {
			return err
		}
		if got := statusOf(ap); !got.equal(want) {
			return fmt.Errorf("AuditPolicy %s status\n got %+v\nwant %+v", auditPolicy, got, want)
		}
		return nil
	})
}

// logShards logs the status of every AuditShard.
func (c *cluster) logShards(t *testing.T) {
	t.Helper()
	list := &auditv1alpha1.AuditShardList{}
	if err := c.env.Client.List(context.Background(), list, client.InNamespace(c.id.Namespace)); err != nil {
		t.Logf("listing AuditShards: %v", err)
		return
	}
	for _, as := range list.Items {
		t.Logf("AuditShard %s (resourceVersion %s): %+v", as.Name, as.ResourceVersion, as.Status)
	}
}

// waitLeader waits until a live member leads: the leader election Lease has a holder that renewed it within
// the last second (its renewals are 500 ms apart; a member killed stops renewing).
func (c *cluster) waitLeader(t *testing.T) {
	t.Helper()
	envtestutil.Eventually(t, time.Minute, func() error {
		lease := &coordinationv1.Lease{}
		if err := c.env.Client.Get(context.Background(), client.ObjectKey{Namespace: c.id.Namespace, Name: "celaudit.celaudit.io"}, lease); err != nil {
			return err
		}
		if ptr.Deref(lease.Spec.HolderIdentity, "") == "" || lease.Spec.RenewTime == nil || time.Since(lease.Spec.RenewTime.Time) > time.Second {
			return fmt.Errorf("no live leader: holder %q, renewed %v", ptr.Deref(lease.Spec.HolderIdentity, ""), lease.Spec.RenewTime)
		}
		return nil
	})
}

// expectStaleShard checks that the AuditShard of the member of index, scaled away, is still stored with an
// epoch before epoch: the status just checked was added up without it.
func (c *cluster) expectStaleShard(t *testing.T, index int, epoch int64) {
	t.Helper()
	as := &auditv1alpha1.AuditShard{}
	if err := c.env.Client.Get(context.Background(), client.ObjectKey{Namespace: c.id.Namespace, Name: fmt.Sprintf("shard-%d", index)}, as); err != nil {
		t.Fatalf("the AuditShard of member %d, scaled away: %v", index, err)
	}
	if as.Status.Epoch >= epoch || len(as.Status.Policies) == 0 {
		t.Fatalf("the AuditShard of member %d, scaled away, has epoch %d and %d policies; want an earlier epoch than %d, with the policy",
			index, as.Status.Epoch, len(as.Status.Policies), epoch)
	}
}

// assertLeaderWrotePolicies checks, from the recorded writes in the API server's order, that every write of
// the AuditPolicy (its status, its finalizer) was made by the member whose write of the leader election
// Lease came last before it, and held the Lease: one writer, the leader, at every moment.
func (c *cluster) assertLeaderWrotePolicies(t *testing.T) {
	t.Helper()
	var leases, policies []call
	for _, m := range c.all() {
		leases = append(leases, m.recorded(func(x call) bool { return x.leaseWrite() && x.ok() })...)
		policies = append(policies, m.recorded(func(x call) bool { return x.policyWrite() && x.ok() })...)
	}
	if len(policies) == 0 {
		t.Fatal("no member wrote the AuditPolicy")
	}
	byRevision := func(a, b call) int { return int(a.Revision - b.Revision) }
	slices.SortFunc(leases, byRevision)
	writers := map[string]bool{}
	for _, w := range policies {
		writers[w.Member] = true
		i := sort.Search(len(leases), func(i int) bool { return leases[i].Revision >= w.Revision }) - 1
		switch {
		case w.Revision == 0:
			t.Errorf("a write of the AuditPolicy the API server's order cannot place: %s", w)
		case i < 0:
			t.Errorf("the AuditPolicy was written before any member held the Lease: %s", w)
		case leases[i].Member != w.Member || leases[i].Holder == "":
			t.Errorf("the AuditPolicy was written by %s while the Lease was last written by %s (holder %q): %s",
				w.Member, leases[i].Member, leases[i].Holder, w)
		}
	}
	t.Logf("%d AuditPolicy writes by %d successive leaders checked against %d Lease writes", len(policies), len(writers), len(leases))
}
