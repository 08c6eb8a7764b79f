// Package bench holds celaudit's benchmarks: micro benchmarks of one rule on one object (CRD rule, VAP
// validation and the bare cel-go floor, in micro_test.go) and, in the macro directory, a program that
// measures a whole audit on a real control plane. hack/bench.sh runs both and writes BENCHMARKS.md.
package bench
