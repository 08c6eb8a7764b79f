// Package shard splits the audit of stored objects between the members of a sharded deployment.
//
// The keys are those of KEP-5866 (ShardedListAndWatch): the FNV-1a 64 hash of an object's
// metadata.namespace, split into contiguous ranges of [0, 2^64), one per member. Hashing the namespace
// rather than the UID keeps every namespace, and so every namespaced report, with one member: a report has
// one writer, as with a single replica. A Layout says which range a member owns and which generation of the
// membership it belongs to; the same hash and ranges serve the API server's shardSelector and the
// client-side filter used where the API server does not honour it.
package shard
