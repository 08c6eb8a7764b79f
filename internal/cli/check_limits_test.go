package cli

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fillPattern stands, in the size fixtures, for N bytes ("<fill N>") or N bytes in base64 ("<base64 N>"):
// the files would be megabytes.
var fillPattern = regexp.MustCompile(`<(fill|base64) (\d+)>`)

// writeSizeFixture writes testdata/check/size/name with its fills written out, and returns its path.
func writeSizeFixture(t *testing.T, name string) string {
	t.Helper()
	data := mustRead(t, filepath.Join("testdata", "check", "size", name))
	data = fillPattern.ReplaceAllStringFunc(data, func(m string) string {
		parts := fillPattern.FindStringSubmatch(m)
		n, err := strconv.Atoi(parts[2])
		if err != nil {
			t.Fatal(err)
		}
		if parts[1] == "base64" {
			return base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", n)))
		}
		return strings.Repeat("x", n)
	})
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckSizeLimits checks that objects the API server refuses for their size get one result saying so, with
// the API server's message, and no other: the API server refuses them before any policy is asked.
func TestCheckSizeLimits(t *testing.T) {
	const rules = "testdata/check/size/rules.yaml"
	spaces := regexp.MustCompile(` +`)
	for _, tc := range []struct {
		name    string
		fixture string
		format  string
		code    ExitCode
		want    []string // in the output, runs of spaces as one
		notWant []string
	}{{
		name: "ConfigMap data of exactly 1 MiB", fixture: "configmap-at-limit.yaml", code: ExitOK,
		want:    []string{"vap/cm-owner 1 1 0 0 0 0", "1 objects checked, 0 matched by no policy."},
		notWant: []string{"apiserver/request-size"},
	}, {
		name: "ConfigMap data and binaryData over 1 MiB", fixture: "configmap-over-limit.yaml", code: ExitViolations,
		want: []string{
			"apiserver/request-size 1 0 1 0 0 0",
			"vap/cm-owner 0 0 0 0 0 0",
			"fail apiserver/request-size data team-a/ConfigMap/over-limit",
			"[]: Too long: may not be more than 1048576 bytes",
		},
		notWant: []string{"configmaps need an owner label"},
	}, {
		name: "Secret data and stringData over 1 MiB", fixture: "secret-over-limit.yaml", code: ExitViolations,
		want: []string{"fail apiserver/request-size data team-a/Secret/over-limit", "data: Too long: may not be more than 1048576 bytes"},
	}, {
		name: "Secret stringData replacing a large data key", fixture: "secret-replaced.yaml", code: ExitOK,
		want:    []string{"1 objects checked, 1 matched by no policy."},
		notWant: []string{"apiserver/request-size"},
	}, {
		name: "request body over 3 MiB", fixture: "request-too-large.yaml", code: ExitViolations,
		want: []string{
			"apiserver/request-size 1 0 1 0 0 0",
			"fail apiserver/request-size request body default/ConfigMap/huge",
			"Request entity too large: limit is 3145728",
		},
		notWant: []string{"Too long", "configmaps need an owner label"},
	}, {
		name: "request body over 3 MiB as JSON", fixture: "request-too-large.yaml", format: OutputJSON, code: ExitViolations,
		want: []string{`"policy": "request-size"`, `"rule": "request body"`, `"result": "fail"`, `"bytes": "3145`, `"message": "Request entity too large: limit is 3145728"`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-f", writeSizeFixture(t, tc.fixture), "--rules", rules}
			if tc.format != "" {
				args = append(args, "-o", tc.format)
			}
			out, errOut, code := runCheck("", args...)
			if code != tc.code {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			got := spaces.ReplaceAllString(out, " ")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}
