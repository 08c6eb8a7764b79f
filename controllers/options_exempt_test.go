package controllers

import (
	"flag"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
)

func TestExemptionFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want v1alpha1.Exemptions
		err  string
	}{
		{name: "none: nothing added", args: nil},
		{
			name: "each flag adds its kind",
			args: []string{"--exempt-namespaces=gitops, argocd", "--exempt-resources=/configmaps,apps/*",
				"--exempt-users=break-glass", "--exempt-groups=oncall,sre"},
			want: v1alpha1.Exemptions{Namespaces: []string{"gitops", "argocd"}, Resources: []string{"/configmaps", "apps/*"},
				Users: []string{"break-glass"}, Groups: []string{"oncall", "sre"}},
		},
		{name: "bad namespace", args: []string{"--exempt-namespaces=ok,Not_OK"}, err: `--exempt-namespaces: exempt namespace "Not_OK" is not a namespace name`},
		{name: "bad resource", args: []string{"--exempt-resources=configmaps"}, err: `--exempt-resources: exempt resource "configmaps": want group/resource`},
		{name: "empty entry", args: []string{"--exempt-users=a,,b"}, err: `--exempt-users="a,,b": entry 2 is empty`},
		{name: "trailing comma", args: []string{"--exempt-groups=a,"}, err: `--exempt-groups="a,": entry 2 is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("celaudit", flag.ContinueOnError)
			o := DefaultOptions()
			o.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := o.exemptions()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("exemptions %+v, want %+v", got, tc.want)
			}
		})
	}
}
