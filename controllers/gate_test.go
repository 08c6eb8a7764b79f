package controllers

import (
	"testing"

	"github.com/celaudit/celaudit/internal/audit"
)

func TestStartupGate(t *testing.T) {
	type step struct {
		listed     audit.PolicySource // when set, the source lists names
		names      []string
		reconciled *audit.PolicyKey
		wantOpen   bool
	}
	crd := func(name string) *audit.PolicyKey { k := audit.CRDKey(name); return &k }
	vap := func(name string) *audit.PolicyKey { k := audit.VAPKey(name); return &k }
	cases := []struct {
		name  string
		steps []step
	}{
		{
			name: "opens once both sources listed nothing",
			steps: []step{
				{listed: audit.SourceCRD},
				{listed: audit.SourceVAP, wantOpen: true},
			},
		},
		{
			name: "waits for every listed policy",
			steps: []step{
				{listed: audit.SourceCRD, names: []string{"a", "b"}},
				{listed: audit.SourceVAP, names: []string{"a"}},
				{reconciled: crd("a")},
				{reconciled: vap("a")},
				{reconciled: crd("b"), wantOpen: true},
			},
		},
		{
			name: "a reconcile before the listing counts",
			steps: []step{
				{reconciled: crd("a")},
				{reconciled: vap("p")},
				{listed: audit.SourceCRD, names: []string{"a"}},
				{listed: audit.SourceVAP, names: []string{"p"}, wantOpen: true},
			},
		},
		{
			name: "a policy of the other source with the same name does not count",
			steps: []step{
				{listed: audit.SourceCRD, names: []string{"x"}},
				{listed: audit.SourceVAP},
				{reconciled: vap("x")},
				{reconciled: crd("x"), wantOpen: true},
			},
		},
		{
			name: "a policy created after the listing does not hold the gate",
			steps: []step{
				{listed: audit.SourceCRD},
				{reconciled: vap("new")},
				{listed: audit.SourceVAP, names: []string{"old"}},
				{reconciled: vap("old"), wantOpen: true},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newStartupGate(audit.SourceCRD, audit.SourceVAP)
			opened := 0
			g.OnOpen(func() { opened++ })
			for i, s := range c.steps {
				if s.listed != "" {
					g.Listed(s.listed, s.names)
				}
				if s.reconciled != nil {
					g.Reconciled(*s.reconciled)
				}
				if g.Open() != s.wantOpen {
					t.Fatalf("after step %d: Open() = %v, want %v", i, g.Open(), s.wantOpen)
				}
			}
			if opened != 1 {
				t.Errorf("OnOpen ran %d times, want once", opened)
			}
			late := 0
			g.OnOpen(func() { late++ })
			g.Reconciled(*crd("later"))
			if late != 1 || opened != 1 {
				t.Errorf("after opening: OnOpen ran at once %d times (want 1), earlier ones again %d times (want 1)", late, opened)
			}
		})
	}
}
