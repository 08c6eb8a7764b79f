package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFingerprintDiff(t *testing.T) {
	single := map[string]string{"a summary": "{Pass:3}", "a p Widget/w-1": "fail", "b summary": "{Pass:1}"}
	for _, c := range []struct {
		name string
		got  map[string]string
		want []string
	}{
		{"equal", map[string]string{"a summary": "{Pass:3}", "a p Widget/w-1": "fail", "b summary": "{Pass:1}"}, nil},
		{"a listed result missing", map[string]string{"a summary": "{Pass:3}", "b summary": "{Pass:1}"},
			[]string{`a p Widget/w-1: "", single replica "fail"`}},
		{"a namespace twice and a result more", map[string]string{"a summary": "{Pass:6}", "a p Widget/w-1": "fail", "b summary": "{Pass:1}", "c summary": "{Pass:1}"},
			[]string{`a summary: "{Pass:6}", single replica "{Pass:3}"`, `c summary: "{Pass:1}", single replica ""`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := fingerprintDiff(single, c.got, 5); !slices.Equal(got, c.want) {
				t.Errorf("fingerprintDiff = %q, want %q", got, c.want)
			}
		})
	}
	many := map[string]string{"1": "x", "2": "x", "3": "x"}
	if got := fingerprintDiff(map[string]string{}, many, 2); len(got) != 3 || got[2] != "…" {
		t.Errorf("fingerprintDiff over the limit = %q, want 2 differences and …", got)
	}
}

func TestParseInts(t *testing.T) {
	if got, err := parseInts("1, 2,3"); err != nil || !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("parseInts(1, 2,3) = %v, %v", got, err)
	}
	for _, bad := range []string{"2,3", "1,0", "1,x", ""} {
		if _, err := parseInts(bad); err == nil {
			t.Errorf("parseInts(%q) = nil error, want one", bad)
		}
	}
}

// A seed of another plan is refused, never overwritten: its objects would not match the model.
func TestEnsureSeedRefusesAnotherPlan(t *testing.T) {
	dir := t.TempDir()
	b, err := json.Marshal(Seed{Objects: 1000, Namespaces: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, seedFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	c := config{etcdSeed: dir, namespaces: 10}
	if s, err := ensureSeed(context.Background(), c, 1000); err != nil || s.Objects != 1000 {
		t.Errorf("ensureSeed(same plan) = %+v, %v; want the seed", s, err)
	}
	for _, c := range []struct {
		objects, namespaces int
	}{{2000, 10}, {1000, 100}} {
		_, err := ensureSeed(context.Background(), config{etcdSeed: dir, namespaces: c.namespaces}, c.objects)
		if err == nil || !strings.Contains(err.Error(), "not") {
			t.Errorf("ensureSeed(%d objects, %d namespaces) over a seed of 1000 in 10 = %v, want an error", c.objects, c.namespaces, err)
		}
	}
	// A directory with data but no seed.json is an interrupted creation.
	partial := t.TempDir()
	if err := os.MkdirAll(filepath.Join(partial, seedDataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ensureSeed(context.Background(), config{etcdSeed: partial, namespaces: 10}, 1000); err == nil {
		t.Error("ensureSeed over an interrupted creation = nil error, want one")
	}
}
