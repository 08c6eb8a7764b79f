package controllers

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The README's flag table is what users read: every default it states in backticks must be the default
// the code applies.
func TestREADMEFlagDefaults(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("celaudit", flag.ContinueOnError)
	opts := DefaultOptions()
	opts.BindFlags(fs)
	row := regexp.MustCompile("(?m)^\\| (`--[^|]+) \\| ([^|]+) \\|")
	checked := 0
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		names := strings.Split(m[1], " / ")
		values := strings.Split(strings.TrimSpace(m[2]), " / ")
		if !strings.HasPrefix(values[0], "`") {
			continue // described in words (CPU count, in-cluster): nothing exact to compare
		}
		if len(values) != len(names) {
			t.Errorf("%s: %d defaults for %d flags", m[1], len(values), len(names))
			continue
		}
		for i, name := range names {
			name = strings.TrimPrefix(strings.Trim(name, "`"), "--")
			want := strings.Trim(values[i], "`")
			f := fs.Lookup(name)
			if f == nil {
				t.Errorf("README documents --%s, which is not a flag", name)
				continue
			}
			if !sameDefault(f.DefValue, want) {
				t.Errorf("--%s defaults to %q, README says %q", name, f.DefValue, want)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d flags: has the README's table changed shape?", checked)
	}
}

func sameDefault(got, want string) bool {
	if got == want {
		return true
	}
	g, err1 := time.ParseDuration(got)
	w, err2 := time.ParseDuration(want)
	return err1 == nil && err2 == nil && g == w
}

// runBounded runs every function, each holding a token of sem while it runs, so that no more run at once
// than sem has room for: each function, as it starts, finds a token held for every one running.
func TestRunBounded(t *testing.T) {
	sem := make(chan struct{}, 3)
	var (
		mu        sync.Mutex // guards running, ran and untokened
		running   int
		ran       = map[int]bool{}
		untokened []int // functions that started with fewer tokens held than functions running
		started   = make(chan int, 20)
		release   = make(chan struct{})
		boom      = errors.New("boom")
		fns       = make([]func() error, 20)
	)
	for i := range fns {
		fns[i] = func() error {
			mu.Lock()
			running++
			// A token is taken before a function starts and given back after it has returned (and left
			// running): every function counted in running holds one.
			if len(sem) < running {
				untokened = append(untokened, i)
			}
			mu.Unlock()
			started <- i
			<-release
			mu.Lock()
			running--
			ran[i] = true
			mu.Unlock()
			if i%7 == 0 {
				return boom
			}
			return nil
		}
	}
	releaseAll := sync.OnceFunc(func() { close(release) })
	defer releaseAll() // a failure below leaves none blocked
	done := make(chan error, 1)
	go func() { done <- runBounded(context.Background(), fns, sem) }()
	// The functions hold their tokens until released: as many as sem has room for run at once.
	for n := range cap(sem) {
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("runBounded returned (%v) with %d functions started and none released", err, n)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d functions started at once, want %d", n, cap(sem))
		}
	}
	releaseAll()
	err := <-done
	mu.Lock()
	defer mu.Unlock()
	if len(untokened) > 0 {
		t.Fatalf("functions %v started without a token of their own", untokened)
	}
	if len(ran) != len(fns) {
		t.Fatalf("ran %d of %d", len(ran), len(fns))
	}
	var joined interface{ Unwrap() []error }
	if !errors.Is(err, boom) || !errors.As(err, &joined) || len(joined.Unwrap()) != 3 {
		t.Fatalf("got %v, want the three failures joined", err)
	}
}

func TestQPSFlag(t *testing.T) {
	fs := flag.NewFlagSet("celaudit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts := DefaultOptions()
	opts.BindFlags(fs)
	if err := fs.Parse([]string{"--kube-api-qps=12.5"}); err != nil || opts.QPS != 12.5 {
		t.Fatalf("QPS = %v, err %v; want 12.5", opts.QPS, err)
	}
	if err := fs.Parse([]string{"--kube-api-qps=fast"}); err == nil {
		t.Fatal("a QPS that is not a number was accepted")
	}
}

func TestRunBoundedStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sem := make(chan struct{}, 1)
	sem <- struct{}{} // every token taken: only the context can end the wait
	ran := false
	err := runBounded(ctx, []func() error{func() error { ran = true; return nil }}, sem)
	if ran || !errors.Is(err, context.Canceled) {
		t.Fatalf("ran %v, err %v; want not run and context.Canceled", ran, err)
	}
}
