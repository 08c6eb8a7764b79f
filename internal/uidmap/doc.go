// Package uidmap holds maps keyed by object UID that keep the UIDs the API server assigns (canonical UUIDs)
// as 16 bytes rather than 36-byte strings. The operator keeps a few such entries for every audited object, so
// at cluster scale the key's size is a large part of its memory.
package uidmap
