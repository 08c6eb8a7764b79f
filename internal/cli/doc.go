// Package cli is the kubectl-celaudit command line: cobra commands over the evaluation engine (package
// engine), so that its verdicts and messages are the operator's by construction.
//
// Commands return errors, never exit: Run maps them to the documented exit codes (see ExitCode), so that
// every command is testable in process with its own streams.
package cli
