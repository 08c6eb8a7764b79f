package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestConvert(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := convert(f)
	if err != nil {
		t.Fatal(err)
	}
	// Two warns of one object are one fail line; the CRD result, without a binding, is left out.
	want := []string{
		"limits\tlimits\tns-1\tConfigMap\tcm-1\tpass\tWarn,Audit",
		"limits\tlimits\tns-1\tConfigMap\tcm-2\tfail\tWarn,Audit",
	}
	if !slices.Equal(got, want) {
		t.Errorf("convert:\n got %q\nwant %q", got, want)
	}
}

func TestCompare(t *testing.T) {
	want, err := readTSV(filepath.Join("testdata", "verdicts.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		cm1Pass     = "limits\tlimits\tns-1\tConfigMap\tcm-1\tpass\tWarn,Audit"
		cm2Fail     = "limits\tlimits\tns-1\tConfigMap\tcm-2\tfail\tWarn,Audit"
		cm2Pass     = "limits\tlimits\tns-1\tConfigMap\tcm-2\tpass\tWarn,Audit"
		cm3Skip     = "limits\tlimits\tns-1\tConfigMap\tcm-3\tskip\tWarn,Audit"
		d1Pass      = "replicas\treplicas\tns-2\tDeployment\td-1\tpass\tDeny"
		otherObject = "limits\tlimits\tns-1\tConfigMap\tcm-9\tpass\tWarn,Audit"
	)
	for _, c := range []struct {
		name string
		got  []string
		want string
		ok   bool
	}{{
		name: "every verdict equal, no result for the excluded pairs",
		got:  []string{cm1Pass, cm2Fail},
		want: "2 expected lines, 2 from check: 2 equal, 0 missing, 0 extra; 2 of 2 excluded pairs without a result",
		ok:   true,
	}, {
		name: "a skip for an excluded pair",
		got:  []string{cm1Pass, cm2Fail, cm3Skip},
		want: "2 expected lines, 3 from check: 2 equal, 0 missing, 1 extra; 1 of 2 excluded pairs without a result",
	}, {
		name: "a pass for an excluded pair",
		got:  []string{cm1Pass, cm2Fail, d1Pass},
		want: "2 expected lines, 3 from check: 2 equal, 0 missing, 1 extra; 1 of 2 excluded pairs without a result",
	}, {
		name: "a verdict differs",
		got:  []string{cm1Pass, cm2Pass},
		want: "2 expected lines, 2 from check: 1 equal, 1 missing, 1 extra; 2 of 2 excluded pairs without a result",
	}, {
		name: "a result missing, another unexpected",
		got:  []string{cm1Pass, otherObject},
		want: "2 expected lines, 2 from check: 1 equal, 1 missing, 1 extra; 2 of 2 excluded pairs without a result",
	}} {
		t.Run(c.name, func(t *testing.T) {
			got := compare(want, c.got)
			if s := got.String(); s != c.want {
				t.Errorf("compare:\n got %s\nwant %s", s, c.want)
			}
			if got.ok() != c.ok {
				t.Errorf("ok() = %t, want %t", got.ok(), c.ok)
			}
		})
	}
}
