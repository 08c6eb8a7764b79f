package main

import "testing"

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
