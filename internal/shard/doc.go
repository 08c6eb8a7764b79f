// Package shard splits the audit of stored objects between the members of a sharded deployment.
//
// The keys are those of KEP-5866 (ShardedListAndWatch): the FNV-1a 64 hash of an object's
// metadata.namespace, split into Count·Stripes equal contiguous ranges of [0, 2^64) dealt out round-robin to
// the Count members (DefaultStripes ranges each), so that namespaces with numbered names, whose hashes lie
// close together, do not all fall to one member. Hashing the namespace rather than the UID keeps every
// namespace, and so every namespaced report, with one member: a report has one writer, as with a single
// replica. A Layout says which ranges a member owns and which generation of the membership it belongs to;
// the same hash and ranges serve the API server's shardSelector (the OR of one shardRange per range) and the
// client-side filter used where the API server does not honour it.
package shard
