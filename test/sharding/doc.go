// Package sharding runs celaudit's binary as the members of a sharded audit against one real control plane,
// each member through a proxy of its own that records every request it makes. The members are the pods of a
// StatefulSet object (envtest runs no kubelet: the test starts and stops the processes, each with its
// ordinal's pod name); the StatefulSet is scaled 3 -> 2 -> 4 and a member is killed and restarted. The union
// of the members' reports must equal one unsharded audit's, result by result, and every report must have had
// one writer at a time, never going back in epoch. Each scenario runs with the API server's
// ShardedListAndWatch gate on (the API server filters) and off (each member filters what it receives).
package sharding
