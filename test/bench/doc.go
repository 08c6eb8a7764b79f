// Package bench holds celaudit's benchmarks: micro benchmarks of one rule on one object (CRD rule, VAP
// validation and the bare cel-go floor, in micro_test.go) and, in the macro directory, a program that
// measures a whole audit on a real control plane; with -mutate the same program measures, in memory, what a
// MutatingAdmissionPolicy costs per (policy, object) pair beside a ValidatingAdmissionPolicy (make
// bench-mutate). hack/bench.sh runs them and writes BENCHMARKS.md.
package bench
