package main

import "github.com/latchkey/latchkey/internal/names"

// The key and channel names below are Redisson's layout (docs/redisson-interop.md), named by
// internal/names as the sync package names them; inspect and the progress line read the same
// keys directly, since they show what Redis holds rather than what a handle knows.

// keys are the names of every key and channel a primitive called name may have.
type keys struct {
	main         string // the lock hash, the permits or the count
	fairQueue    string // fair lock: waiting owner IDs
	fairTimeouts string // fair lock: their deadlines (epoch ms)
	token        string // fenced lock: the token counter
	lockClients  string // lock: latchkey Clients waiting
	semClients   string // semaphore: latchkey Clients waiting
	writers      string // read-write lock: waiting writers' claims
	permits      string // permit-expirable semaphore: acquired permit IDs by expiry
	semChannel   string // semaphores' release channel
	latchChannel string // countdown latch's channel
}

func keysOf(name string) keys {
	return keys{
		main:         name,
		fairQueue:    names.Prefix("redisson_lock_queue", name),
		fairTimeouts: names.Prefix("redisson_lock_timeout", name),
		token:        names.Prefix("redisson_lock_token", name),
		lockClients:  names.Suffix(name, "lock_clients"),
		semClients:   names.Suffix(name, "sem_clients"),
		writers:      names.Suffix(name, "rwlock_writers"),
		permits:      names.Suffix(name, "timeout"),
		semChannel:   names.Prefix("redisson_sc", name),
		latchChannel: names.LatchChannel(name),
	}
}

// readTimeoutKey is the key of a read-write lock reader's k-th read hold.
func readTimeoutKey(name, owner string, k int64) string {
	return names.Suffix(name, owner) + ":rwlock_timeout:" + itoa(k)
}
