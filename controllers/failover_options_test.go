package controllers

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// The leader election flags reach the options, and timings the elector would refuse, or a lease it would
// record shorter than asked, fail at start with the flag named.
func TestLeaderElectionFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string // a part of the error; "" for none
	}{
		{args: []string{"--leader-elect"}},
		{args: []string{"--leader-elect", "--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"}},
		{args: []string{"--leader-election-lease-duration=1500ms"}}, // not elected: not checked
		{args: []string{"--leader-elect", "--leader-election-lease-duration=1500ms", "--leader-election-renew-deadline=1s", "--leader-election-retry-period=100ms"},
			want: "--leader-election-lease-duration must be a whole number of seconds"},
		{args: []string{"--leader-elect", "--leader-election-lease-duration=0s"}, want: "--leader-election-lease-duration"},
		{args: []string{"--leader-elect", "--leader-election-renew-deadline=15s"}, want: "--leader-election-renew-deadline (15s) must be positive and shorter"},
		{args: []string{"--leader-elect", "--leader-election-renew-deadline=0s"}, want: "--leader-election-renew-deadline (0s)"},
		{args: []string{"--leader-elect", "--leader-election-retry-period=9s"}, want: "--leader-election-retry-period (9s)"},
		{args: []string{"--leader-elect", "--leader-election-retry-period=0s"}, want: "--leader-election-retry-period (0s)"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("celaudit", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			opts := DefaultOptions()
			opts.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			_, err := opts.parse()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	fs := flag.NewFlagSet("celaudit", flag.ContinueOnError)
	opts := DefaultOptions()
	opts.BindFlags(fs)
	if err := fs.Parse([]string{"--leader-election-lease-duration=7s", "--leader-election-renew-deadline=5s", "--leader-election-retry-period=1s"}); err != nil {
		t.Fatal(err)
	}
	if opts.LeaseDuration != 7*time.Second || opts.RenewDeadline != 5*time.Second || opts.RetryPeriod != time.Second {
		t.Fatalf("lease %s, renew deadline %s, retry period %s; want 7s, 5s, 1s", opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod)
	}
}
