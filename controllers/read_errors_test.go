package controllers

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestForbiddenHint checks the grant a forbidden read's error result and Event name, with the default bound
// on the wait between retries, and that the README shows the same label and bound.
func TestForbiddenHint(t *testing.T) {
	for _, tc := range []struct {
		maxBackoff time.Duration
		want       string
	}{
		{DefaultOptions().MaxReadBackoff, `to grant it, create a ClusterRole labelled celaudit.io/aggregate-to-reader: "true" ` +
			`with a rule allowing get, list and watch on it; celaudit reads it within 1m0s, without a restart`},
		{0, `to grant it, create a ClusterRole labelled celaudit.io/aggregate-to-reader: "true" ` +
			`with a rule allowing get, list and watch on it; celaudit retries with backoff and reads it without a restart`},
	} {
		if got := forbiddenHint(tc.maxBackoff); got != tc.want {
			t.Errorf("forbiddenHint(%s) = %q, want %q", tc.maxBackoff, got, tc.want)
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The README wraps the message: compare it with the line breaks made spaces.
	flat := strings.Join(strings.Fields(string(readme)), " ")
	if hint := forbiddenHint(DefaultOptions().MaxReadBackoff); !strings.Contains(flat, hint) {
		t.Errorf("the README's Read access section does not show the hint %q", hint)
	}
}
