package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// The benchmark cluster: namespaces bench-000..., each holding objects of every kind and one Limits param
// object, plus bench-params holding the ConfigMap param. Objects are numbered; object i lives in namespace
// i % namespaces and its kind is decided by i % 10 (30% widgets, 20% gadgets, 30% ConfigMaps, 20%
// Deployments). One object in twenty of each kind breaks exactly one rule when it is written; whether that is
// a violation in the reports is decided by the model (selectors may leave it uncovered).
const (
	group         = "bench.celaudit.io"
	benchLabel    = "celaudit-bench"
	kindLabel     = "bench/kind"
	paramsNS      = "bench-params"
	paramCM       = "cm-limits"
	paramCMMax    = 50
	limitsName    = "limits"
	limitsMax     = 10
	deployMax     = 5
	cmMaxKeys     = 8
	policyPrefix  = "bench-"
	colorPolicy   = policyPrefix + "widget-color"
	cmSizePolicy  = policyPrefix + "cm-size"
	labelsPolicy  = policyPrefix + "deploy-labels"
	widgetsCRD    = "widgets." + group
	gadgetsCRD    = "gadgets." + group
	limitsCRD     = "limits." + group
	violatingMod  = 20
	violatingSlot = 7
)

type kind int

const (
	widget kind = iota
	gadget
	configMap
	deployment
	numKinds
)

func (k kind) String() string {
	return [...]string{"Widget", "Gadget", "ConfigMap", "Deployment"}[k]
}

// resource is the resource the audit reads objects of the kind in (widgets also in v1beta1).
func (k kind) resource() schema.GroupVersionResource {
	return [...]schema.GroupVersionResource{
		{Group: group, Version: "v1", Resource: "widgets"},
		{Group: group, Version: "v1", Resource: "gadgets"},
		{Version: "v1", Resource: "configmaps"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
	}[k]
}

var (
	widgetsV1beta1 = schema.GroupVersionResource{Group: group, Version: "v1beta1", Resource: "widgets"}
	limitsGVR      = schema.GroupVersionResource{Group: group, Version: "v1", Resource: "limits"}
)

// violation names the rule an object was written to break; "" for none.
type violation string

const (
	none            violation = ""
	vWidgetCRD      violation = "crd-widgets"
	vWidgetColor    violation = "widget-color"
	vGadgetCRD      violation = "crd-gadgets"
	vGadgetOwner    violation = "gadget-owner"
	vCMOwner        violation = "cm-owner"
	vCMSize         violation = "cm-size"
	vCMKeys         violation = "cm-keys"
	vDeployReplicas violation = "deploy-replicas"
	vDeployParam    violation = "deploy-replicas-param"
	vDeployLabels   violation = "deploy-labels"
	vDeployImage    violation = "deploy-image"
)

var variants = [numKinds][]violation{
	widget:     {vWidgetCRD, vWidgetColor},
	gadget:     {vGadgetCRD, vGadgetOwner},
	configMap:  {vCMOwner, vCMSize, vCMKeys},
	deployment: {vDeployReplicas, vDeployParam, vDeployLabels, vDeployImage},
}

// object is what the harness knows of one object it wrote.
type object struct {
	i         int
	kind      kind
	ns        int
	violation violation
	// cmSize is a ConfigMap's data.size and noApp says a Deployment lacks its app label; the flip phases
	// change them.
	cmSize int
	noApp  bool
}

func (o *object) name() string {
	return fmt.Sprintf("%s-%06d", [...]string{"w", "g", "cm", "d"}[o.kind], o.i)
}

func nsName(i int) string { return fmt.Sprintf("bench-%03d", i) }

func kindOf(i int) kind {
	switch r := i % 10; {
	case r < 3:
		return widget
	case r < 5:
		return gadget
	case r < 8:
		return configMap
	default:
		return deployment
	}
}

// plan returns the objects of a cluster of n objects in namespaces namespaces.
func plan(n, namespaces int) []*object {
	out := make([]*object, n)
	for i := range n {
		o := &object{i: i, kind: kindOf(i), ns: i % namespaces}
		if (i/10)%violatingMod == violatingSlot {
			vs := variants[o.kind]
			o.violation = vs[(i/(10*violatingMod))%len(vs)]
		}
		o.cmSize = i%9 + 1
		if o.violation == vCMSize {
			o.cmSize = 99
		}
		o.noApp = o.violation == vDeployLabels
		out[i] = o
	}
	return out
}

// Model: what the reports must say, computed from what the harness wrote and the policies it installed,
// without the operator's code.

// counts are summary counts.
type counts struct {
	Pass, Fail, Warn, Error, Skip int
}

func (c counts) total() int { return c.Pass + c.Fail + c.Warn + c.Error + c.Skip }

func (c *counts) add(o counts) {
	c.Pass += o.Pass
	c.Fail += o.Fail
	c.Warn += o.Warn
	c.Error += o.Error
	c.Skip += o.Skip
}

func (c *counts) sub(o counts) {
	c.Pass -= o.Pass
	c.Fail -= o.Fail
	c.Warn -= o.Warn
	c.Error -= o.Error
	c.Skip -= o.Skip
}

// model holds the policy settings the harness changes during the run.
type model struct {
	purpleAllowed bool // the widget color policy after the edit
	namespaces    int
	auditPolicies int // AuditPolicies created beside the ValidatingAdmissionPolicies
}

// verdictOf counts one result: a pass when ok, else a fail for a [Deny] binding or a CRD rule, a warn for
// [Warn, Audit] or [Audit].
func verdictOf(ok, deny bool) counts {
	switch {
	case ok:
		return counts{Pass: 1}
	case deny:
		return counts{Fail: 1}
	}
	return counts{Warn: 1}
}

// expect returns the results the reports must hold for o, and whether o violates anything.
func (m model) expect(o *object) (c counts) {
	prod := o.ns%2 == 0
	switch o.kind {
	case widget:
		replicasOK := o.violation != vWidgetCRD
		c.add(verdictOf(replicasOK, true)) // crd rule, read as v1
		c.add(verdictOf(replicasOK, true)) // and as v1beta1
		c.add(verdictOf(o.violation != vWidgetColor || m.purpleAllowed, false))
		c.add(verdictOf(true, false)) // all-labels
	case gadget:
		c.add(verdictOf(o.violation != vGadgetCRD, true))
		c.add(verdictOf(o.violation != vGadgetOwner, true))
		c.add(verdictOf(true, false))
	case configMap:
		c.add(verdictOf(o.violation != vCMOwner, false))
		c.add(verdictOf(o.cmSize <= paramCMMax, false))
		c.add(verdictOf(o.violation != vCMKeys, true))
		c.add(verdictOf(true, false)) // cm-name, matchCondition true
		c.add(verdictOf(true, false)) // all-labels
	case deployment:
		replicas := deploymentReplicas(o)
		if prod {
			c.add(verdictOf(replicas <= deployMax, true))
		}
		c.add(verdictOf(replicas <= limitsMax, false))
		c.add(verdictOf(!o.noApp, false))
		c.add(verdictOf(o.violation != vDeployImage, true))
		c.add(verdictOf(true, true))  // deploy-ns, namespaceObject
		c.add(verdictOf(true, false)) // all-labels
	}
	return c
}

func deploymentReplicas(o *object) int64 {
	switch o.violation {
	case vDeployReplicas:
		return deployMax + 3
	case vDeployParam:
		return limitsMax + 2
	}
	return int64(o.i%3 + 1)
}

// expectAuditPolicies returns the results the AuditPolicies must give o.
func (m model) expectAuditPolicies(o *object) (c counts) {
	for _, a := range auditPolicies(m.auditPolicies) {
		if r, ok := a.spec.eval(m, o); ok {
			c.add(r)
		}
	}
	return c
}

// expected sums the model over every object, the ValidatingAdmissionPolicies' and the AuditPolicies' results,
// plus the Limits param objects and the AuditPolicy objects (each audited against its CRD's schema: one pass
// each). violating counts objects with at least one fail or warn.
func (m model) expected(objs []*object) (total counts, violating int) {
	for _, o := range objs {
		c := m.expect(o)
		c.add(m.expectAuditPolicies(o))
		total.add(c)
		if c.Fail+c.Warn > 0 {
			violating++
		}
	}
	total.Pass += m.namespaces + m.auditPolicies
	return total, violating
}

// Objects.

func labels(k kind) map[string]string { return map[string]string{kindLabel: k.String()} }

// build returns the object as written.
func (o *object) build() client.Object {
	ns, name := nsName(o.ns), o.name()
	switch o.kind {
	case widget:
		replicas, color := int64(o.i%3+1), []string{"red", "green", "blue"}[o.i%3]
		switch o.violation {
		case vWidgetCRD:
			replicas = 7
		case vWidgetColor:
			color = "purple"
		}
		return custom("Widget", ns, name, map[string]any{"replicas": replicas, "maxReplicas": int64(5), "color": color, "owner": "team-a"})
	case gadget:
		spec := map[string]any{"size": []string{"S", "M", "L"}[o.i%3], "owner": "team-b", "ports": []any{int64(8080), int64(8443)}}
		switch o.violation {
		case vGadgetCRD:
			spec["size"] = "XL"
		case vGadgetOwner:
			delete(spec, "owner")
		}
		return custom("Gadget", ns, name, spec)
	case configMap:
		data := map[string]string{"owner": "team-c", "size": strconv.Itoa(o.cmSize), "mode": "fast"}
		switch o.violation {
		case vCMOwner:
			delete(data, "owner")
		case vCMKeys:
			for k := range cmMaxKeys + 2 {
				data[fmt.Sprintf("key%d", k)] = "v"
			}
		}
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels(configMap)}, Data: data}
	default:
		meta := map[string]string{kindLabel: deployment.String(), "app": name}
		image := "registry.local/app:1.0"
		switch o.violation {
		case vDeployLabels:
			delete(meta, "app")
		case vDeployImage:
			image = "registry.local/app:latest"
		}
		podLabels := map[string]string{"bench-app": name}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: meta},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(deploymentReplicas(o))),
				Selector: &metav1.LabelSelector{MatchLabels: podLabels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
				},
			},
		}
	}
}

func custom(kindName, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(group + "/v1")
	u.SetKind(kindName)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(labels(map[string]kind{"Widget": widget, "Gadget": gadget}[kindName]))
	return u
}

// createAll creates objs with concurrency workers and returns how long it took.
func createAll(ctx context.Context, c client.Client, objs []*object, workers int) (time.Duration, error) {
	start := time.Now()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	// Progress every 5%: a million objects take most of an hour.
	step := max(len(objs)/20, 10000)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(objs) || ctx.Err() != nil {
					return
				}
				if i > 0 && i%step == 0 {
					took := time.Since(start)
					cp := controlPlaneMemory()
					logf("creating: %d of %d after %s (%.0f/s), load average %s, RSS kube-apiserver %s etcd %s", i, len(objs), took.Round(time.Second),
						float64(i)/took.Seconds(), loadAverage(), mib(cp["kube-apiserver"].RSS), mib(cp["etcd"].RSS))
				}
				if err := createRetrying(ctx, c, objs[i].build()); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = fmt.Errorf("creating objects: %w", ctx.Err())
	}
	return time.Since(start), firstErr
}

// createRetrying creates obj, retrying transient errors (a loaded API server may time out).
func createRetrying(ctx context.Context, c client.Client, obj client.Object) error {
	var err error
	for attempt := range 5 {
		if err = c.Create(ctx, obj); err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	return fmt.Errorf("creating %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
}

// CRDs.

const widgetSpec = `type: object
required: [replicas, maxReplicas]
properties:
  replicas: {type: integer, minimum: 0}
  maxReplicas: {type: integer, minimum: 0}
  color: {type: string, maxLength: 32}
  owner: {type: string, maxLength: 63}
`

const gadgetSpec = `type: object
properties:
  size: {type: string}
  owner: {type: string}
  ports: {type: array, maxItems: 16, items: {type: integer}}
`

// rules are the x-kubernetes-validations added to the spec of each version once the objects are stored
// (the API server would reject the violating ones otherwise).
var rules = map[string]string{
	widgetsCRD: `- rule: self.replicas <= self.maxReplicas
  messageExpression: "'the ' + self.color + ' widget has more replicas than maxReplicas'"
`,
	gadgetsCRD: `- rule: self.size in ['S', 'M', 'L']
  message: size must be S, M or L
`,
}

func crd(name, plural, kindName, specYAML string, versions ...string) (*apiextensionsv1.CustomResourceDefinition, error) {
	spec := &apiextensionsv1.JSONSchemaProps{}
	if err := yaml.Unmarshal([]byte(specYAML), spec); err != nil {
		return nil, fmt.Errorf("parsing schema of %s: %w", plural, err)
	}
	c := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(kindName), Kind: kindName, ListKind: kindName + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
		},
	}
	for i, v := range versions {
		c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: v, Served: true, Storage: i == 0,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"apiVersion": {Type: "string"}, "kind": {Type: "string"}, "metadata": {Type: "object"},
					"spec": *spec.DeepCopy(),
				},
			}},
		})
	}
	return c, nil
}

func crds() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	w, err := crd(widgetsCRD, "widgets", "Widget", widgetSpec, "v1", "v1beta1")
	if err != nil {
		return nil, err
	}
	g, err := crd(gadgetsCRD, "gadgets", "Gadget", gadgetSpec, "v1")
	if err != nil {
		return nil, err
	}
	l, err := crd(limitsCRD, "limits", "Limits", "type: object\nproperties:\n  maxReplicas: {type: integer}\n", "v1")
	if err != nil {
		return nil, err
	}
	return []*apiextensionsv1.CustomResourceDefinition{w, g, l}, nil
}

// tighten adds the rules to the widget and gadget CRDs, in every version.
func tighten(ctx context.Context, c client.Client) error {
	for name, y := range rules {
		var vs apiextensionsv1.ValidationRules
		if err := yaml.Unmarshal([]byte(y), &vs); err != nil {
			return fmt.Errorf("parsing rules of %s: %w", name, err)
		}
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, cur); err != nil {
			return fmt.Errorf("getting %s: %w", name, err)
		}
		for i := range cur.Spec.Versions {
			spec := cur.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"]
			spec.XValidations = vs
			cur.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		}
		if err := c.Update(ctx, cur); err != nil {
			return fmt.Errorf("adding rules to %s: %w", name, err)
		}
	}
	return nil
}

// setupCluster creates the CRDs (without rules), namespaces and param objects.
func setupCluster(ctx context.Context, c client.Client, namespaces int) error {
	cs, err := crds()
	if err != nil {
		return err
	}
	for _, x := range cs {
		if err := c.Create(ctx, x); err != nil {
			return fmt.Errorf("creating CRD %s: %w", x.Name, err)
		}
		if err := envtestutil.WaitEstablished(ctx, c, x.Name); err != nil {
			return err
		}
	}
	// A CRD is established a moment before its resource is served to clients.
	if err := waitServed(ctx, c); err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: paramsNS}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: paramsNS, Name: paramCM, Labels: map[string]string{paramLabel: "limits"}},
			Data: map[string]string{"max": strconv.Itoa(paramCMMax)}},
	}
	for i := range namespaces {
		tier := "dev"
		if i%2 == 0 {
			tier = "prod"
		}
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i), Labels: map[string]string{benchLabel: "yes", "tier": tier}}})
	}
	for _, o := range objs {
		if err := createRetrying(ctx, c, o); err != nil {
			return err
		}
	}
	for i := range namespaces {
		l := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"maxReplicas": int64(limitsMax)}}}
		l.SetAPIVersion(group + "/v1")
		l.SetKind("Limits")
		l.SetNamespace(nsName(i))
		l.SetName(limitsName)
		if err := createRetrying(ctx, c, l); err != nil {
			return err
		}
	}
	return nil
}

func waitServed(ctx context.Context, c client.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, k := range []string{"WidgetList", "GadgetList", "LimitsList"} {
		for {
			l := &unstructured.UnstructuredList{}
			l.SetAPIVersion(group + "/v1")
			l.SetKind(k)
			err := c.List(ctx, l, client.Limit(1))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not served: %w", k, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// Policies.

type policySpec struct {
	name       string
	resources  []admissionregistrationv1.Rule
	expression string
	message    string
	actions    []admissionregistrationv1.ValidationAction
	nsSelector map[string]string
	objSel     map[string]string
	paramKind  *admissionregistrationv1.ParamKind
	paramRef   *admissionregistrationv1.ParamRef
	matchCond  string
}

var (
	warnAudit = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
	auditOnly = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
	deny      = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	inBench   = map[string]string{benchLabel: "yes"}
)

func res(g, v, r string) admissionregistrationv1.Rule {
	return admissionregistrationv1.Rule{APIGroups: []string{g}, APIVersions: []string{v}, Resources: []string{r}}
}

func colorExpression(purple bool) string {
	if purple {
		return "object.spec.color in ['red', 'green', 'blue', 'purple']"
	}
	return "object.spec.color in ['red', 'green', 'blue']"
}

// policySpecs are the ValidatingAdmissionPolicies and their bindings; the model mirrors them.
func policySpecs() []policySpec {
	widgets, gadgets := res(group, "v1", "widgets"), res(group, "v1", "gadgets")
	cms, deploys := res("", "v1", "configmaps"), res("apps", "v1", "deployments")
	return []policySpec{
		{name: "widget-color", resources: []admissionregistrationv1.Rule{widgets}, expression: colorExpression(false),
			message: "color must be red, green or blue", actions: warnAudit, nsSelector: inBench},
		{name: "gadget-owner", resources: []admissionregistrationv1.Rule{gadgets}, expression: "has(object.spec.owner)",
			message: "gadgets must name an owner", actions: deny, objSel: map[string]string{kindLabel: gadget.String()}},
		{name: "all-labels", resources: []admissionregistrationv1.Rule{widgets, gadgets, cms, deploys},
			expression: "has(object.metadata.labels) && '" + kindLabel + "' in object.metadata.labels",
			message:    "objects must carry the " + kindLabel + " label", actions: warnAudit, nsSelector: inBench},
		{name: "cm-owner", resources: []admissionregistrationv1.Rule{cms}, expression: "has(object.data) && 'owner' in object.data",
			message: "configmaps must name an owner", actions: warnAudit, nsSelector: inBench},
		{name: "cm-size", resources: []admissionregistrationv1.Rule{cms},
			expression: "!has(object.data) || !('size' in object.data) || int(object.data.size) <= int(params.data.max)",
			message:    "size exceeds the limit", actions: warnAudit, nsSelector: inBench,
			paramKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			paramRef: &admissionregistrationv1.ParamRef{Name: paramCM, Namespace: paramsNS,
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}},
		{name: "cm-keys", resources: []admissionregistrationv1.Rule{cms}, expression: "!has(object.data) || size(object.data) <= " + strconv.Itoa(cmMaxKeys),
			message: "too many keys", actions: deny, objSel: map[string]string{kindLabel: configMap.String()}},
		{name: "cm-name", resources: []admissionregistrationv1.Rule{cms}, expression: "object.metadata.name.size() < 64",
			message: "name too long", actions: auditOnly, objSel: map[string]string{kindLabel: configMap.String()},
			matchCond: "object.metadata.name.startsWith('cm-')"},
		{name: "deploy-replicas", resources: []admissionregistrationv1.Rule{deploys}, expression: "object.spec.replicas <= " + strconv.Itoa(deployMax),
			message: "too many replicas for prod", actions: deny, nsSelector: map[string]string{"tier": "prod"}},
		{name: "deploy-replicas-param", resources: []admissionregistrationv1.Rule{deploys},
			expression: "object.spec.replicas <= params.spec.maxReplicas", message: "replicas exceed the namespace limit",
			actions: warnAudit, nsSelector: inBench,
			paramKind: &admissionregistrationv1.ParamKind{APIVersion: group + "/v1", Kind: "Limits"},
			paramRef: &admissionregistrationv1.ParamRef{Name: limitsName,
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}},
		{name: "deploy-labels", resources: []admissionregistrationv1.Rule{deploys},
			expression: "has(object.metadata.labels) && 'app' in object.metadata.labels", message: "deployments must carry an app label",
			actions: auditOnly, nsSelector: inBench},
		{name: "deploy-image", resources: []admissionregistrationv1.Rule{deploys},
			expression: "object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest'))", message: "images must not use :latest",
			actions: deny, nsSelector: inBench},
		{name: "deploy-ns", resources: []admissionregistrationv1.Rule{deploys},
			expression: "namespaceObject.metadata.labels['" + benchLabel + "'] == 'yes'", message: "deployments belong in bench namespaces",
			actions: deny, nsSelector: inBench},
	}
}

func (p policySpec) objects() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	var rs []admissionregistrationv1.NamedRuleWithOperations
	for _, r := range p.resources {
		rs = append(rs, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       r,
		}})
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyPrefix + p.name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			ParamKind:        p.paramKind,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: rs},
			Validations:      []admissionregistrationv1.Validation{{Expression: p.expression, Message: p.message}},
		},
	}
	if p.matchCond != "" {
		policy.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "selected", Expression: p.matchCond}}
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyPrefix + p.name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: p.actions,
			ParamRef:          p.paramRef,
			MatchResources:    &admissionregistrationv1.MatchResources{},
		},
	}
	if p.nsSelector != nil {
		binding.Spec.MatchResources.NamespaceSelector = &metav1.LabelSelector{MatchLabels: p.nsSelector}
	}
	if p.objSel != nil {
		binding.Spec.MatchResources.ObjectSelector = &metav1.LabelSelector{MatchLabels: p.objSel}
	}
	return policy, binding
}

// installPolicies creates every policy and binding.
func installPolicies(ctx context.Context, c client.Client) (policies, bindings int, err error) {
	for _, p := range policySpecs() {
		policy, binding := p.objects()
		if err := c.Create(ctx, policy); err != nil {
			return 0, 0, fmt.Errorf("creating policy %s: %w", policy.Name, err)
		}
		if err := c.Create(ctx, binding); err != nil {
			return 0, 0, fmt.Errorf("creating binding %s: %w", binding.Name, err)
		}
		policies++
		bindings++
	}
	return policies, bindings, nil
}
