package cli

import (
	"errors"
	"fmt"
)

// ExitCode is the process exit status of a command, as the CLIs users already script return them.
type ExitCode int

const (
	// ExitOK: nothing new would be rejected (whatif), nothing fails (check), or the command succeeded.
	ExitOK ExitCode = 0
	// ExitViolations: the proposal would newly reject objects (whatif), or objects would be rejected (check).
	// With --fail-on warn, warnings count as well.
	ExitViolations ExitCode = 1
	// ExitBadInput: bad arguments or invalid input files; the message names the file and the reason.
	ExitBadInput ExitCode = 2
	// ExitCluster: the cluster could not be reached or read.
	ExitCluster ExitCode = 3
)

// exitError carries the exit code of a failed command with the error that explains it.
type exitError struct {
	code ExitCode
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// BadInput returns an error that exits with ExitBadInput.
func BadInput(format string, args ...any) error {
	return &exitError{code: ExitBadInput, err: fmt.Errorf(format, args...)}
}

// ClusterError returns an error that exits with ExitCluster.
func ClusterError(format string, args ...any) error {
	return &exitError{code: ExitCluster, err: fmt.Errorf(format, args...)}
}

// errViolations is returned by a command whose output shows objects that would be rejected: nothing more is
// printed on stderr, the output says it all.
var errViolations = &exitError{code: ExitViolations, err: errors.New("objects would be rejected")}

// Violations returns the error of a command that ran and found objects that would be rejected.
func Violations() error { return errViolations }

// CodeOf returns the exit code for err: ExitOK for nil, the code of an error made by BadInput, ClusterError
// or Violations (wrapped or not), and ExitBadInput for anything else, which is how cobra reports bad
// flags and arguments.
func CodeOf(err error) ExitCode {
	if err == nil {
		return ExitOK
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return ExitBadInput
}
