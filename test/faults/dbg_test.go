package faults_test

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

func debugLogger(t *testing.T) logr.Logger {
	if os.Getenv("FAULTS_DEBUG") == "" {
		return logr.Discard()
	}
	return funcr.New(func(prefix, args string) { t.Log(prefix, args) }, funcr.Options{Verbosity: 2})
}
