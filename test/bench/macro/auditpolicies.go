package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// AuditPolicies: with -audit-policies N the harness also creates N AuditPolicies in Audit over the same
// resources as the ValidatingAdmissionPolicies. celaudit evaluates each as a ValidatingAdmissionPolicy bound
// with validationActions [Audit] (failures are warn results, reported under the AuditPolicy's name) and writes
// the counts into its status. Five are converted from the benchmark's policies with envtestutil.AuditPolicyFor,
// five are written directly; past ten the list repeats under new names.

const (
	apPrefix = policyPrefix + "ap-"
	// paramLabel selects the ConfigMap param of the AuditPolicy whose paramRef has a selector.
	paramLabel = "bench/param"
	// cmWarnSize is the data.size from which the cm-data AuditPolicy warns.
	cmWarnSize = 90
)

var auditPoliciesGVR = v1alpha1.GroupVersion.WithResource("auditpolicies")

// apSpec is one AuditPolicy of the benchmark and its model.
type apSpec struct {
	name string
	// policy returns the AuditPolicy as written, named name.
	policy func(name string) (*v1alpha1.AuditPolicy, error)
	// eval returns the policy's results for o and whether the policy covers o at all. It is the model: written
	// from the policy's meaning, not from celaudit's code.
	eval func(m model, o *object) (counts, bool)
}

// apInstance is one AuditPolicy created in the cluster.
type apInstance struct {
	name string
	spec apSpec
}

// fromVAP returns the AuditPolicy standing for the benchmark's policy named vapName and its binding, with
// enforcement Audit, the category and severity given.
func fromVAP(vapName, category, severity string) func(string) (*v1alpha1.AuditPolicy, error) {
	return func(name string) (*v1alpha1.AuditPolicy, error) {
		for _, p := range policySpecs() {
			if p.name != vapName {
				continue
			}
			policy, binding := p.objects()
			ap := envtestutil.AuditPolicyFor(name, policy, binding, v1alpha1.Audit)
			ap.Spec.Category, ap.Spec.Severity = category, severity
			return ap, nil
		}
		return nil, fmt.Errorf("no benchmark policy %q", vapName)
	}
}

// newAP returns an AuditPolicy in Audit over rules, with one validation per expression, changed by opts.
func newAP(rules []admissionregistrationv1.Rule, validations []admissionregistrationv1.Validation, opts ...func(*v1alpha1.AuditPolicySpec)) func(string) (*v1alpha1.AuditPolicy, error) {
	return func(name string) (*v1alpha1.AuditPolicy, error) {
		var rs []admissionregistrationv1.NamedRuleWithOperations
		for _, r := range rules {
			rs = append(rs, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       r,
			}})
		}
		ap := &v1alpha1.AuditPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AuditPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.AuditPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: rs},
				Validations:      validations,
				Enforcement:      v1alpha1.Audit,
			},
		}
		for _, o := range opts {
			o(&ap.Spec)
		}
		return ap, nil
	}
}

func selector(labels map[string]string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: labels}
}

var (
	prodNS = map[string]string{"tier": "prod"}
	devNS  = map[string]string{"tier": "dev"}
)

func isProd(o *object) bool { return o.ns%2 == 0 }

// auditPolicySpecs are the ten distinct AuditPolicies: five converted from the benchmark's policies, five
// written directly.
func auditPolicySpecs() []apSpec {
	return append(convertedSpecs(), writtenSpecs()...)
}

// only judges the objects of kind k with f, and matches no other.
func only(k kind, f func(o *object) (counts, bool)) func(model, *object) (counts, bool) {
	return func(_ model, o *object) (counts, bool) {
		if o.kind != k {
			return counts{}, false
		}
		return f(o)
	}
}

// convertedSpecs are the AuditPolicies converted from the benchmark's policies: [Warn, Audit], [Deny] and
// [Audit] bindings all become [Audit], so every failure is a warn. The policy edit changes the widget-color
// ValidatingAdmissionPolicy, not this copy: purple widgets stay violations here.
func convertedSpecs() []apSpec {
	return []apSpec{
		{name: "widget-color", policy: fromVAP("widget-color", "Style", "low"),
			eval: only(widget, func(o *object) (counts, bool) { return verdictOf(o.violation != vWidgetColor, false), true })},
		{name: "gadget-owner", policy: fromVAP("gadget-owner", "Ownership", "medium"),
			eval: only(gadget, func(o *object) (counts, bool) { return verdictOf(o.violation != vGadgetOwner, false), true })},
		{name: "cm-size", policy: fromVAP("cm-size", "Capacity", ""), // param: a ConfigMap by name and namespace
			eval: only(configMap, func(o *object) (counts, bool) { return verdictOf(o.cmSize <= paramCMMax, false), true })},
		{name: "deploy-replicas-param", policy: fromVAP("deploy-replicas-param", "Capacity", "high"), // param: Limits in the object's namespace
			eval: only(deployment, func(o *object) (counts, bool) { return verdictOf(deploymentReplicas(o) <= limitsMax, false), true })},
		{name: "deploy-image", policy: fromVAP("deploy-image", "", "medium"),
			eval: only(deployment, func(o *object) (counts, bool) { return verdictOf(o.violation != vDeployImage, false), true })},
	}
}

// writtenSpecs are the AuditPolicies written directly: a variable, a matchCondition, two validations, one that
// errors on some objects, params by label selector, namespace and object selectors.
func writtenSpecs() []apSpec {
	return []apSpec{widgetReplicasProd(), cmData(), cmOwnerTeam(), gadgetPorts(), deployCMParam()}
}

// widgetReplicasProd is the widgets CRD's rule again, as a policy with a variable and a messageExpression, in prod namespaces.
func widgetReplicasProd() apSpec {
	widgets := res(group, "v1", "widgets")
	return apSpec{name: "widget-replicas-prod",
		policy: newAP([]admissionregistrationv1.Rule{widgets},
			[]admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= variables.limit",
				MessageExpression: "'replicas ' + string(object.spec.replicas) + ' exceed ' + string(variables.limit)"}},
			func(s *v1alpha1.AuditPolicySpec) {
				s.Variables = []admissionregistrationv1.Variable{{Name: "limit", Expression: "object.spec.maxReplicas"}}
				s.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: selector(prodNS)}
				s.Severity = "high"
			}),
		eval: only(widget, func(o *object) (counts, bool) {
			if !isProd(o) {
				return counts{}, false
			}
			return verdictOf(o.violation != vWidgetCRD, false), true
		})}
}

// cmData has two validations behind a matchCondition: one warn per failed validation, one pass when none fails.
func cmData() apSpec {
	cms := res("", "v1", "configmaps")
	return apSpec{name: "cm-data",
		policy: newAP([]admissionregistrationv1.Rule{cms},
			[]admissionregistrationv1.Validation{
				{Expression: "object.data.mode in ['fast', 'slow']", Message: "mode must be fast or slow"},
				{Expression: "!('size' in object.data) || int(object.data.size) < " + strconv.Itoa(cmWarnSize), Message: "size is close to the limit"},
			},
			func(s *v1alpha1.AuditPolicySpec) {
				s.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "has-mode", Expression: "has(object.data) && 'mode' in object.data"}}
				s.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: selector(map[string]string{kindLabel: configMap.String()})}
				s.Category = "Capacity"
			}),
		eval: only(configMap, func(o *object) (counts, bool) {
			return verdictOf(o.cmSize < cmWarnSize, false), true // every ConfigMap has mode fast
		})}
}

// cmOwnerTeam cannot judge some objects: a ConfigMap without owner makes the expression fail with "no
// such key", an error result whatever the failurePolicy, so the policy is not safe to enforce.
func cmOwnerTeam() apSpec {
	cms := res("", "v1", "configmaps")
	return apSpec{name: "cm-owner-team",
		policy: newAP([]admissionregistrationv1.Rule{cms},
			[]admissionregistrationv1.Validation{{Expression: "object.data.owner.startsWith('team-')", Message: "owner must be a team"}},
			func(s *v1alpha1.AuditPolicySpec) {
				s.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
				s.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: selector(devNS)}
				s.Category = "Ownership"
			}),
		eval: only(configMap, func(o *object) (counts, bool) {
			switch {
			case isProd(o):
				return counts{}, false
			case o.violation == vCMOwner:
				return counts{Error: 1}, true
			}
			return counts{Pass: 1}, true
		})}
}

// gadgetPorts has no matchResources at all, and a macro: every gadget passes.
func gadgetPorts() apSpec {
	gadgets := res(group, "v1", "gadgets")
	return apSpec{name: "gadget-ports",
		policy: newAP([]admissionregistrationv1.Rule{gadgets},
			[]admissionregistrationv1.Validation{{Expression: "!has(object.spec.ports) || object.spec.ports.all(p, p >= 1024 && p < 65536)",
				MessageExpression: "'port ' + string(object.spec.ports.filter(p, p < 1024 || p >= 65536)[0]) + ' is privileged or out of range'"}}),
		eval: only(gadget, func(*object) (counts, bool) { return counts{Pass: 1}, true })}
}

// deployCMParam has a param found by label selector, in prod namespaces: every Deployment passes.
func deployCMParam() apSpec {
	deploys := res("apps", "v1", "deployments")
	return apSpec{name: "deploy-cm-param",
		policy: newAP([]admissionregistrationv1.Rule{deploys},
			[]admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= int(params.data.max)", Message: "replicas above the cluster limit"}},
			func(s *v1alpha1.AuditPolicySpec) {
				s.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
				s.ParamRef = &admissionregistrationv1.ParamRef{Namespace: paramsNS, Selector: selector(map[string]string{paramLabel: "limits"}),
					ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
				s.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: selector(prodNS)}
				s.Severity = "info"
			}),
		eval: only(deployment, func(o *object) (counts, bool) {
			if !isProd(o) {
				return counts{}, false
			}
			return counts{Pass: 1}, true
		})}
}

// auditPolicies returns the model's n AuditPolicies: the ten specs, repeated under new names past ten.
func auditPolicies(n int) []apInstance {
	specs := auditPolicySpecs()
	out := make([]apInstance, n)
	for i := range n {
		s := specs[i%len(specs)]
		name := apPrefix + s.name
		if i >= len(specs) {
			name += "-" + strconv.Itoa(i/len(specs))
		}
		out[i] = apInstance{name: name, spec: s}
	}
	return out
}

// installAuditPolicies creates the model's AuditPolicies.
func installAuditPolicies(ctx context.Context, c client.Client, aps []apInstance) error {
	for _, a := range aps {
		ap, err := a.spec.policy(a.name)
		if err != nil {
			return err
		}
		ap.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AuditPolicy"}
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ap)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: raw}
		unstructured.RemoveNestedField(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		if err := c.Create(ctx, u); err != nil {
			return fmt.Errorf("creating AuditPolicy %s: %w", a.name, err)
		}
	}
	return nil
}

// apStatus is the part of an AuditPolicy's status the model predicts.
type apStatus struct {
	Matched int
	counts
	// SafeToEnforce is the status of the SafeToEnforce condition: True, False, Unknown, or "" when there is none.
	SafeToEnforce string
}

func (s apStatus) String() string {
	return fmt.Sprintf("matched %d, pass %d, fail %d, warn %d, error %d, skip %d, SafeToEnforce %q",
		s.Matched, s.Pass, s.Fail, s.Warn, s.Error, s.Skip, s.SafeToEnforce)
}

// statuses returns the status each AuditPolicy must have once objs are audited: the objects it covers, its
// results by verdict, and SafeToEnforce: False when one is a fail, warn or error, else Unknown when one is a
// skip or none matched, else True.
func (m model) statuses(objs []*object) map[string]apStatus {
	out := map[string]apStatus{}
	for _, a := range auditPolicies(m.auditPolicies) {
		var s apStatus
		for _, o := range objs {
			if c, ok := a.spec.eval(m, o); ok {
				s.Matched++
				s.add(c)
			}
		}
		switch {
		case s.Fail+s.Warn+s.Error > 0:
			s.SafeToEnforce = string(metav1.ConditionFalse)
		case s.Skip > 0 || s.Matched == 0:
			// Not everything judged: never taken for safe.
			s.SafeToEnforce = string(metav1.ConditionUnknown)
		default:
			s.SafeToEnforce = string(metav1.ConditionTrue)
		}
		out[a.name] = s
	}
	return out
}

// StatusCheck is the comparison of every AuditPolicy's status with the model at one point of the run.
type StatusCheck struct {
	Matched bool
	// Seconds is how long after the moment named by the check the statuses last changed.
	Seconds    float64
	Expected   map[string]apStatus
	Got        map[string]apStatus
	Mismatches []string
}

// auditPolicyWatch follows the AuditPolicies' statuses through an informer started before any measured
// window, as reports does for the reports.
type auditPolicyWatch struct {
	mu        sync.Mutex
	byName    map[string]apStatus
	lastEvent time.Time
	events    int
	errs      []error
}

func newAuditPolicyWatch() *auditPolicyWatch {
	return &auditPolicyWatch{byName: map[string]apStatus{}}
}

func (w *auditPolicyWatch) watch(ctx context.Context, dyn dynamic.Interface) error {
	ri := dyn.Resource(auditPoliciesGVR)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, opts)
		},
	}
	event := func(t watch.EventType) func(obj interface{}) {
		return func(obj interface{}) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				w.handle(t, u, time.Now())
			}
		}
	}
	_, inf := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &unstructured.Unstructured{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    event(watch.Added),
			UpdateFunc: func(_, obj interface{}) { event(watch.Modified)(obj) },
			DeleteFunc: event(watch.Deleted),
		},
	})
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("watching auditpolicies: %w", ctx.Err())
	}
	return nil
}

func (w *auditPolicyWatch) handle(t watch.EventType, u *unstructured.Unstructured, at time.Time) {
	ap := &v1alpha1.AuditPolicy{}
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ap)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("decoding AuditPolicy %s: %w", u.GetName(), err))
		return
	}
	if t == watch.Deleted {
		delete(w.byName, ap.Name)
	} else {
		w.byName[ap.Name] = statusOf(ap)
	}
	w.lastEvent = at
	w.events++
}

func statusOf(ap *v1alpha1.AuditPolicy) apStatus {
	st := ap.Status
	s := apStatus{Matched: int(st.Matched), counts: counts{Pass: int(st.Pass), Fail: int(st.Fail), Warn: int(st.Warn), Error: int(st.Error), Skip: int(st.Skip)}}
	if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSafeToEnforce); c != nil {
		s.SafeToEnforce = string(c.Status)
	}
	return s
}

// snapshot returns the statuses, the time of the last event and the number of events so far.
func (w *auditPolicyWatch) snapshot() (map[string]apStatus, time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]apStatus, len(w.byName))
	for k, v := range w.byName {
		out[k] = v
	}
	return out, w.lastEvent, w.events
}

func (w *auditPolicyWatch) errors() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]error(nil), w.errs...)
}

// compareStatuses lists, sorted, every AuditPolicy whose status differs from want.
func compareStatuses(want, got map[string]apStatus) []string {
	var out []string
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: not found", name))
		case g != w:
			out = append(out, fmt.Sprintf("%s: %s, want %s", name, g, w))
		}
	}
	sort.Strings(out)
	return out
}

// waitStatuses waits until every AuditPolicy's status equals want and no AuditPolicy event arrived for quiet,
// or timeout. since is the moment the check measures from.
func (w *auditPolicyWatch) waitStatuses(ctx context.Context, want map[string]apStatus, since time.Time, quiet, timeout time.Duration) StatusCheck {
	deadline := time.Now().Add(timeout)
	for {
		got, last, _ := w.snapshot()
		mismatches := compareStatuses(want, got)
		done := len(mismatches) == 0 && time.Since(last) >= quiet
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			out := StatusCheck{Matched: len(mismatches) == 0, Expected: want, Got: got, Mismatches: mismatches}
			if last.After(since) {
				out.Seconds = last.Sub(since).Seconds()
			}
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isAuditPolicy matches requests for AuditPolicies and their status.
func isAuditPolicy(res string) bool {
	return strings.HasPrefix(res, v1alpha1.GroupVersion.Group+"/auditpolicies")
}

// isAuditPolicyStatus matches requests for the status of AuditPolicies.
func isAuditPolicyStatus(res string) bool {
	return res == v1alpha1.GroupVersion.Group+"/auditpolicies/status"
}
