// Package failover runs celaudit's binary as two replicas electing a leader against a real control plane, each
// through a proxy of its own that records every request it makes, and kills, stops gracefully or pauses the
// leader: the tests check from the API server's side that at every moment one replica at most writes, and
// that the reports end up equal to a fresh audit of the final state.
package failover
