package controllers

import "github.com/prometheus/client_golang/prometheus"

// HoldVAPCompile makes an operator built with o call hold, with the policy's name, before it compiles a
// ValidatingAdmissionPolicy: a test holds one compile back to see what goes on meanwhile.
func HoldVAPCompile(o *Options, hold func(policy string)) { o.beforeVAPCompile = hold }

// PolicyMetrics returns the collector of op's per-policy metrics: the metrics registry holds only the first
// operator's of a process.
func PolicyMetrics(op *Operator) prometheus.Collector { return newReadinessCollector(op.readiness) }

// Collectors returns op's own metrics.
func Collectors(op *Operator) []prometheus.Collector { return op.collectors }
