// Package audit defines the values every rule source produces and the report builder consumes: verdicts,
// results and the compiled-policy contract. It holds no state and talks to no API server, so each source of
// rules (CRD validation, ValidatingAdmissionPolicy, celaudit's own policies) can be tested on its own and
// plugged into the same scan and report pipeline.
package audit
