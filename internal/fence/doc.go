// Package fence keeps a leader that may have lost its lease from writing.
//
// Leader election alone does not give a single writer: a leader paused (a stopped process, a long garbage
// collection, a frozen node) keeps believing it leads until its elector runs again, while another replica has
// taken the expired lease and writes too. The fence closes by time, not by belief: Lock records when each
// successful renewal of the lease began, and every mutating request through RoundTripper is refused, without
// being sent, once that beginning is older than the validity (the renew deadline, which is shorter than the
// lease). A request sent is given that same moment as its context deadline, so it cannot land late either.
//
// Why the beginning of a renewal: another replica measures the lease from when it observed the renewed
// record, which is after the renewal reached the API server, which is after it began. Measured from the
// beginning, the validity never outlasts the lease as any other replica sees it; the lease duration minus the
// validity absorbs clock-rate differences between replicas.
package fence
