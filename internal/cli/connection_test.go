package cli

import (
	"strings"
	"testing"
)

// TestClientFlags checks the values the client flags refuse, before any connection is made, and that help
// shows them with the defaults.
func TestClientFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{args: []string{"summary", "--kube-api-qps", "0"}, stderr: "--kube-api-qps 0: want a positive number"},
		{args: []string{"summary", "--kube-api-qps", "-1"}, stderr: "--kube-api-qps -1: want a positive number"},
		{args: []string{"whatif", "--binding", "b", "--actions", "Deny", "--kube-api-burst", "0"}, stderr: "--kube-api-burst 0: want a positive number"},
		{args: []string{"summary", "-v", "x"}, stderr: `invalid argument "x" for "-v, --v" flag`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, errOut, code := runPlugin(append(tc.args, "--kubeconfig", "/nonexistent"), "")
			if code != ExitBadInput || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, ExitBadInput, tc.stderr)
			}
		})
	}
	out, _, code := runPlugin([]string{"summary", "--help"}, "")
	for _, want := range []string{"--kube-api-burst int", "(default 100)", "--kube-api-qps float32", "(default 50)", "-v, --v Level"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("help (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
}
