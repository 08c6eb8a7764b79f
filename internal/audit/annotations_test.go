package audit

import (
	"testing"
	"time"
)

func TestParseAnnotations(t *testing.T) {
	cases := []struct {
		name        string
		annotations map[string]string
		want        PolicyAnnotations
	}{
		{name: "none", annotations: nil, want: PolicyAnnotations{}},
		{
			name:        "category trimmed",
			annotations: map[string]string{"celaudit.io/category": "  Pod Security "},
			want:        PolicyAnnotations{Category: "Pod Security", Signature: "celaudit.io/category=  Pod Security "},
		},
		{
			name:        "blank category is unset",
			annotations: map[string]string{"celaudit.io/category": "   "},
			want:        PolicyAnnotations{Signature: "celaudit.io/category=   "},
		},
		{
			name:        "severity trimmed and lowercased",
			annotations: map[string]string{"celaudit.io/severity": " HIGH "},
			want:        PolicyAnnotations{Severity: "high", Signature: "celaudit.io/severity= HIGH "},
		},
		{
			name:        "unknown severity is unset",
			annotations: map[string]string{"celaudit.io/severity": "urgent"},
			want:        PolicyAnnotations{Signature: "celaudit.io/severity=urgent"},
		},
		{
			name:        "resync interval",
			annotations: map[string]string{"celaudit.io/resync-interval": "90s"},
			want:        PolicyAnnotations{ResyncInterval: 90 * time.Second, HasResyncInterval: true, Signature: "celaudit.io/resync-interval=90s"},
		},
		{
			name:        "zero resync interval disables resync",
			annotations: map[string]string{"celaudit.io/resync-interval": "0"},
			want:        PolicyAnnotations{HasResyncInterval: true, Signature: "celaudit.io/resync-interval=0"},
		},
		{
			name:        "negative resync interval is unset",
			annotations: map[string]string{"celaudit.io/resync-interval": "-1m"},
			want:        PolicyAnnotations{Signature: "celaudit.io/resync-interval=-1m"},
		},
		{
			name:        "unparsable resync interval is unset",
			annotations: map[string]string{"celaudit.io/resync-interval": "hourly"},
			want:        PolicyAnnotations{Signature: "celaudit.io/resync-interval=hourly"},
		},
		{
			name:        "expand pod templates",
			annotations: map[string]string{"celaudit.io/expand-pod-templates": "true"},
			want:        PolicyAnnotations{ExpandPodTemplates: true, Signature: "celaudit.io/expand-pod-templates=true"},
		},
		{
			name:        "expand pod templates trimmed",
			annotations: map[string]string{"celaudit.io/expand-pod-templates": " True\n"},
			want:        PolicyAnnotations{ExpandPodTemplates: true, Signature: "celaudit.io/expand-pod-templates= True\n"},
		},
		{
			name:        "expand pod templates false",
			annotations: map[string]string{"celaudit.io/expand-pod-templates": "false"},
			want:        PolicyAnnotations{Signature: "celaudit.io/expand-pod-templates=false"},
		},
		{
			name:        "expand pod templates not a boolean is unset",
			annotations: map[string]string{"celaudit.io/expand-pod-templates": "yes"},
			want:        PolicyAnnotations{Signature: "celaudit.io/expand-pod-templates=yes"},
		},
		{
			name: "signature holds only celaudit annotations, sorted",
			annotations: map[string]string{
				"celaudit.io/rescan":   "2",
				"example.com/owner":    "team-a",
				"celaudit.io/category": "c",
				"celaudit.io.evil/x":   "y",
			},
			want: PolicyAnnotations{Category: "c", Signature: "celaudit.io/category=c\ncelaudit.io/rescan=2"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseAnnotations(c.annotations); got != c.want {
				t.Errorf("ParseAnnotations(%v) =\n%+v\nwant\n%+v", c.annotations, got, c.want)
			}
		})
	}
}

func TestPolicyAnnotationsDefaults(t *testing.T) {
	set := PolicyAnnotations{Category: "c", Severity: "low", ResyncInterval: 0, HasResyncInterval: true}
	var unset PolicyAnnotations
	if got := set.CategoryOr("d"); got != "c" {
		t.Errorf("CategoryOr = %q, want c", got)
	}
	if got := unset.CategoryOr("d"); got != "d" {
		t.Errorf("CategoryOr of unset = %q, want d", got)
	}
	if got := set.SeverityOr("medium"); got != "low" {
		t.Errorf("SeverityOr = %q, want low", got)
	}
	if got := unset.SeverityOr("medium"); got != "medium" {
		t.Errorf("SeverityOr of unset = %q, want medium", got)
	}
	if got := set.ResyncOr(time.Hour); got != 0 {
		t.Errorf("ResyncOr = %v, want 0 (the policy disables its resync)", got)
	}
	if got := unset.ResyncOr(time.Hour); got != time.Hour {
		t.Errorf("ResyncOr of unset = %v, want 1h", got)
	}
}
