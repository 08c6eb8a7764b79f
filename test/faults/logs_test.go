package faults_test

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// logLines keeps what an operator logs at its default verbosity, one line per call, as funcr writes them.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

// logger returns a logger whose lines l keeps; with FAULTS_DEBUG set they go to the test's log too.
func (l *logLines) logger(t *testing.T) logr.Logger {
	verbose := os.Getenv("FAULTS_DEBUG") != ""
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, prefix+" "+args)
		l.mu.Unlock()
		if verbose {
			t.Log(prefix, args)
		}
	}, funcr.Options{})
}

// since returns the lines logged after the first n.
func (l *logLines) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[min(n, len(l.lines)):]...)
}

// count returns how many lines were logged.
func (l *logLines) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// matching returns the lines that contain s.
func matching(lines []string, s string) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
