package main

import (
	"strings"
	"testing"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/engine"
)

func TestQuantile(t *testing.T) {
	sorted := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := quantile(sorted, c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}

func TestRequestKeys(t *testing.T) {
	for _, c := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"verb": "LIST", "resource": "configmaps"}, "LIST configmaps"},
		{map[string]string{"verb": "PUT", "group": "wgpolicyk8s.io", "resource": "policyreports"}, "PUT wgpolicyk8s.io/policyreports"},
		{map[string]string{"verb": "PATCH", "group": "apps", "resource": "deployments", "subresource": "status"}, "PATCH apps/deployments/status"},
		{map[string]string{"verb": "GET"}, "GET (non-resource)"},
	} {
		if got := requestKey(c.labels); got != c.want {
			t.Errorf("requestKey(%v) = %q, want %q", c.labels, got, c.want)
		}
	}
	for uri, want := range map[string]string{"/apis?timeout=32s": "/apis", "/apis/apps/v1": "/apis/apps", "/api": "/api"} {
		if got := pathClass(uri); got != want {
			t.Errorf("pathClass(%q) = %q, want %q", uri, got, want)
		}
	}
}

func TestRequestSums(t *testing.T) {
	before := requests{"LIST configmaps": 3, "PUT wgpolicyk8s.io/policyreports": 10}
	after := requests{"LIST configmaps": 3, "PUT wgpolicyk8s.io/policyreports": 12, "PATCH configmaps": 5}
	d := delta(before, after).minus(map[string]float64{"PATCH configmaps": 5})
	if len(d) != 1 || d["PUT wgpolicyk8s.io/policyreports"] != 2 {
		t.Fatalf("delta = %v, want only 2 report PUTs", d)
	}
	if got := d.sum(writeVerbs, isReport); got != 2 {
		t.Errorf("report writes = %d, want 2", got)
	}
	if got := d.sum([]string{"LIST"}, nil); got != 0 {
		t.Errorf("LISTs = %d, want 0", got)
	}
}

func TestBenchLine(t *testing.T) {
	m := benchLine.FindStringSubmatch("BenchmarkCRDRule/pass-2    \t   21051\t    107100 ns/op\t   46332 B/op\t     509 allocs/op")
	if m == nil || m[1] != "CRDRule/pass" || m[2] != "107100" || m[3] != "46332" || m[4] != "509" {
		t.Fatalf("parsed %q", m)
	}
}

// TestPlan checks the shape of the benchmark cluster: every kind, one object in twenty written to break a rule,
// every violation variant used.
func TestPlan(t *testing.T) {
	objs := plan(10000, 100)
	kinds := map[kind]int{}
	variantsSeen := map[violation]bool{}
	broken := 0
	for _, o := range objs {
		kinds[o.kind]++
		if o.violation != none {
			broken++
			variantsSeen[o.violation] = true
		}
	}
	if kinds[widget] != 3000 || kinds[gadget] != 2000 || kinds[configMap] != 3000 || kinds[deployment] != 2000 {
		t.Errorf("kinds = %v", kinds)
	}
	if broken != 500 {
		t.Errorf("%d objects written to break a rule, want 500", broken)
	}
	for _, vs := range variants {
		for _, v := range vs {
			if !variantsSeen[v] {
				t.Errorf("violation %s never used", v)
			}
		}
	}
}

// TestAuditPolicyModel checks the model of the ten AuditPolicies on plan(2000, 100) against counts worked out
// by hand. In that plan object i is in namespace i % 100, so prod (even namespaces) exactly when i is even;
// the objects written to break a rule are i = 200b + 70 + r for blocks b = 0..9 and r = 0..9, where r = 0, 1, 2
// are widgets, 3, 4 gadgets, 5, 6, 7 ConfigMaps and 8, 9 Deployments, and the variant is the kind's b-th
// (cyclically): widgets CRD rule for even b and color for odd b, gadgets CRD rule / owner likewise, ConfigMaps
// owner (b = 0, 3, 6, 9), size (1, 4, 7), keys (2, 5, 8), Deployments replicas (0, 4, 8), param (1, 5, 9),
// labels (2, 6), image (3, 7). 600 widgets (400 prod), 400 gadgets, 600 ConfigMaps (400 dev), 400
// Deployments (200 prod).
func TestAuditPolicyModel(t *testing.T) {
	objs := plan(2000, 100)
	m := model{namespaces: 100, auditPolicies: 10}
	want := map[string]apStatus{
		// 5 color blocks × 3 widgets.
		"bench-ap-widget-color": {Matched: 600, counts: counts{Pass: 585, Warn: 15}, SafeToEnforce: "False"},
		// 5 owner blocks × 2 gadgets; warn, not the VAP's fail: the AuditPolicy is in Audit.
		"bench-ap-gadget-owner": {Matched: 400, counts: counts{Pass: 390, Warn: 10}, SafeToEnforce: "False"},
		// 3 size blocks × 3 ConfigMaps of size 99.
		"bench-ap-cm-size": {Matched: 600, counts: counts{Pass: 591, Warn: 9}, SafeToEnforce: "False"},
		// 3 param blocks × 2 Deployments of 12 replicas; the 8 replicas of the replicas blocks are within 10.
		"bench-ap-deploy-replicas-param": {Matched: 400, counts: counts{Pass: 394, Warn: 6}, SafeToEnforce: "False"},
		// 2 image blocks × 2 Deployments.
		"bench-ap-deploy-image": {Matched: 400, counts: counts{Pass: 396, Warn: 4}, SafeToEnforce: "False"},
		// Prod widgets only: 5 CRD-rule blocks × 2 prod widgets (r = 0, 2).
		"bench-ap-widget-replicas-prod": {Matched: 400, counts: counts{Pass: 390, Warn: 10}, SafeToEnforce: "False"},
		// Size 99 >= 90: the same 9 ConfigMaps, one warn each (the mode validation passes).
		"bench-ap-cm-data": {Matched: 600, counts: counts{Pass: 591, Warn: 9}, SafeToEnforce: "False"},
		// Dev ConfigMaps only: 4 owner blocks × 2 dev ConfigMaps (r = 5, 7) cannot be judged.
		"bench-ap-cm-owner-team": {Matched: 400, counts: counts{Pass: 392, Error: 8}, SafeToEnforce: "False"},
		"bench-ap-gadget-ports":  {Matched: 400, counts: counts{Pass: 400}, SafeToEnforce: "True"},
		// Prod Deployments only.
		"bench-ap-deploy-cm-param": {Matched: 200, counts: counts{Pass: 200}, SafeToEnforce: "True"},
	}
	got := m.statuses(objs)
	if diff := compareStatuses(want, got); len(diff) > 0 || len(got) != len(want) {
		t.Errorf("statuses differ from the hand count (%d policies):\n%s", len(got), strings.Join(diff, "\n"))
	}

	// The summed summaries gain every AuditPolicy result plus one pass per AuditPolicy object (its CRD's schema).
	with, violatingWith := m.expected(objs)
	without, violatingWithout := model{namespaces: 100}.expected(objs)
	with.sub(without)
	if wantExtra := (counts{Pass: 4329 + 10, Warn: 63, Error: 8}); with != wantExtra {
		t.Errorf("AuditPolicies add %+v to the summaries, want %+v", with, wantExtra)
	}
	// Every object an AuditPolicy warns about already breaks a rule of a VAP or CRD.
	if violatingWith != violatingWithout {
		t.Errorf("violating objects: %d with AuditPolicies, %d without", violatingWith, violatingWithout)
	}
	// An empty cluster: the AuditPolicy objects only.
	if base, _ := m.expected(nil); base != (counts{Pass: 100 + 10}) {
		t.Errorf("baseline expected %+v, want 110 passes", base)
	}

	// The policy edit allows purple in the widget-color VAP, not in its AuditPolicy copy.
	edited := m
	edited.purpleAllowed = true
	if s := edited.statuses(objs)["bench-ap-widget-color"]; s.Warn != 15 {
		t.Errorf("after the edit the widget-color AuditPolicy warns %d times, want 15", s.Warn)
	}
	// A ConfigMap update to size 2 ends both size warnings; to 60, only cm-size's.
	flipped := plan(2000, 100)
	for _, o := range flipped {
		switch o.i {
		case 275: // block 1, a size ConfigMap
			o.cmSize = 2
		case 276:
			o.cmSize = 60
		}
	}
	st := m.statuses(flipped)
	if s := st["bench-ap-cm-size"]; s.Warn != 8 || s.Pass != 592 {
		t.Errorf("cm-size after the updates: %s, want warn 8, pass 592", s)
	}
	if s := st["bench-ap-cm-data"]; s.Warn != 7 || s.Pass != 593 {
		t.Errorf("cm-data after the updates: %s, want warn 7, pass 593", s)
	}
}

// TestAuditPolicyObjects checks the AuditPolicies as written: ten distinct names, repeated with a suffix past
// ten, in Audit, compiling without problems, params wherever a paramRef is given.
func TestAuditPolicyObjects(t *testing.T) {
	aps := auditPolicies(12)
	names := map[string]bool{}
	for _, a := range aps {
		names[a.name] = true
	}
	if len(names) != 12 || aps[10].name != "bench-ap-widget-color-1" || aps[11].name != "bench-ap-gadget-owner-1" {
		t.Errorf("names not distinct or not repeated as expected: %v", names)
	}
	withParams, withNSSelector := 0, 0
	for _, a := range aps[:10] {
		ap, err := a.spec.policy(a.name)
		if err != nil {
			t.Fatal(err)
		}
		if ap.Name != a.name || ap.EnforcementOrDefault() != v1alpha1.Audit || len(ap.Spec.Validations) == 0 || ap.Spec.MatchConstraints == nil {
			t.Errorf("%s: %+v", a.name, ap)
		}
		if (ap.Spec.ParamRef != nil) != (ap.Spec.ParamKind != nil) {
			t.Errorf("%s: paramRef and paramKind go together", a.name)
		}
		if ap.Spec.ParamRef != nil {
			withParams++
		}
		if ap.Spec.MatchResources != nil && ap.Spec.MatchResources.NamespaceSelector != nil && len(ap.Spec.MatchResources.NamespaceSelector.MatchLabels) > 0 {
			withNSSelector++
		}
		compiled, _ := engine.Compiler{}.AuditPolicy(ap)
		if p := compiled.Problems(); len(p) > 0 {
			t.Errorf("%s does not compile: %v", a.name, p)
		}
	}
	if withParams != 3 || withNSSelector != 7 {
		t.Errorf("%d AuditPolicies with params, %d with a namespace selector; want 3 and 7", withParams, withNSSelector)
	}
}

// TestMutateRun runs the -mutate measurement on 300 objects in 10 namespaces and checks which pairs it
// measured, counted by hand from the construction: 90 widgets, 60 gadgets, 90 ConfigMaps and 60 Deployments
// (i%10); in shape are the objects of i/30 even, half of each kind; the ConfigMaps of i/20%5 == 4 (18 of them,
// 9 in shape) opt out of bench-mut-cm-max.
func TestMutateRun(t *testing.T) {
	r, err := runMutate(t.Context(), 300, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key   groupKey
		pairs int
	}{
		{groupKey{"bench-mut-team-label", widget, stateDrift}, 45},
		{groupKey{"bench-mut-team-label", widget, statePass}, 45},
		{groupKey{"bench-mut-team-label", gadget, stateDrift}, 30},
		{groupKey{"bench-mut-team-label", configMap, statePass}, 45},
		{groupKey{"bench-mut-team-label", deployment, stateDrift}, 30},
		{groupKey{"bench-mut-deploy-hardening", deployment, statePass}, 30},
		{groupKey{"bench-mut-cm-max", configMap, stateDrift}, 36},
		{groupKey{"bench-mut-cm-max", configMap, statePass}, 36},
		{groupKey{"bench-mut-cm-max", configMap, stateExcluded}, 18},
		{groupKey{"bench-mut-widget-limits", widget, stateDrift}, 45},
	} {
		if got := r.mapGroups[c.key].pairs; got != c.pairs {
			t.Errorf("%+v: %d pairs, want %d", c.key, got, c.pairs)
		}
	}
	// All four in one Set: results per kind and state (an excluded ConfigMap gets none from cm-max).
	for _, c := range []struct {
		key   groupKey
		pairs int
	}{
		{groupKey{"", widget, stateDrift}, 90},         // team-label, widget-limits
		{groupKey{"", gadget, statePass}, 30},          // team-label
		{groupKey{"", configMap, stateDrift}, 45 + 36}, // team-label, cm-max unless opted out
		{groupKey{"", deployment, statePass}, 60},      // team-label, deploy-hardening
	} {
		if got := r.mapSet[c.key].pairs; got != c.pairs {
			t.Errorf("one Set %+v: %d pairs, want %d", c.key, got, c.pairs)
		}
	}
	// ValidatingAdmissionPolicy results: widget-color and all-labels on widgets; gadget-owner and all-labels on
	// gadgets; cm-owner, cm-size, cm-keys, cm-name and all-labels on ConfigMaps; on Deployments deploy-replicas
	// (prod namespaces: i%10 == 8), deploy-replicas-param, deploy-labels, deploy-image, deploy-ns and all-labels.
	vapPairs := 0
	for _, m := range r.vapGroups {
		vapPairs += m.pairs
	}
	if want := 90*2 + 60*2 + 90*5 + 30*6 + 30*5; vapPairs != want {
		t.Errorf("%d ValidatingAdmissionPolicy pairs, want %d", vapPairs, want)
	}
}
