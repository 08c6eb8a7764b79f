package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkersKeepOrder checks that parsing documents in parallel visits the same objects in the same order,
// and stops at the same first error, as parsing them one by one.
func TestWorkersKeepOrder(t *testing.T) {
	var docs []string
	for i := range 300 {
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d}\n", i))
		if i%7 == 0 {
			docs = append(docs, fmt.Sprintf("{\"apiVersion\": \"v1\", \"kind\": \"Secret\",\n \"metadata\": {\"name\": \"s-%d\"}}\n", i))
		}
	}
	good := strings.Join(docs, "---\n")
	bad := strings.Join(append(docs[:250:250], "apiVersion: v1\nkind: [broken\n", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: after}\n"), "---\n")
	dir := t.TempDir()
	for name, content := range map[string]string{"good.yaml": good, "bad.yaml": bad} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, file := range []string{"good.yaml", "bad.yaml"} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join(dir, file)
			read := func(workers int) (string, error) {
				var out strings.Builder
				err := Reader{Workers: workers}.Walk([]string{path}, func(o Object) error {
					fmt.Fprintf(&out, "%s %s %s %d\n", o.GetKind(), o.GetName(), o.Source, len(o.JSON))
					return nil
				})
				return out.String(), err
			}
			one, oneErr := read(0)
			many, manyErr := read(2)
			if one != many {
				t.Errorf("objects differ:\n--- one by one\n%s\n--- two workers\n%s", one, many)
			}
			if fmt.Sprint(oneErr) != fmt.Sprint(manyErr) {
				t.Errorf("errors differ: one by one %v, two workers %v", oneErr, manyErr)
			}
			if (file == "bad.yaml") != (oneErr != nil) {
				t.Errorf("error %v for %s", oneErr, file)
			}
			if n := strings.Count(one, "\n"); n < 250 {
				t.Errorf("only %d objects read", n)
			}
		})
	}
}
