package main

import "strings"

// The key and channel names below are Redisson's layout (docs/redisson-interop.md). The sync
// package keeps its own copies unexported; inspect and the progress line read the same keys
// directly, since they show what Redis holds rather than what a handle knows.

// prefixName is Redisson's RedissonObject.prefixName: "<prefix>:{name}", or "<prefix>:name"
// when the name carries its own hash tag.
func prefixName(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// suffixName is Redisson's RedissonObject.suffixName: "{name}:<suffix>", or "name:<suffix>".
func suffixName(name, suffix string) string {
	if strings.Contains(name, "{") {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

// keys are the names of every key and channel a primitive called name may have.
type keys struct {
	main         string // the lock hash, the permits or the count
	fairQueue    string // fair lock: waiting owner IDs
	fairTimeouts string // fair lock: their deadlines (epoch ms)
	token        string // fenced lock: the token counter
	lockClients  string // lock: latchkey Clients waiting
	writers      string // read-write lock: waiting writers' claims
	permits      string // permit-expirable semaphore: acquired permit IDs by expiry
	semChannel   string // semaphores' release channel
	latchChannel string // countdown latch's channel
}

func keysOf(name string) keys {
	return keys{
		main:         name,
		fairQueue:    prefixName("redisson_lock_queue", name),
		fairTimeouts: prefixName("redisson_lock_timeout", name),
		token:        prefixName("redisson_lock_token", name),
		lockClients:  suffixName(name, "lock_clients"),
		writers:      suffixName(name, "rwlock_writers"),
		permits:      suffixName(name, "timeout"),
		semChannel:   prefixName("redisson_sc", name),
		// Redisson concatenates this one, braces always (its quirk, kept by the sync package).
		latchChannel: "redisson_countdownlatch__channel__{" + name + "}",
	}
}

// readTimeoutKey is the key of a read-write lock reader's k-th read hold.
func readTimeoutKey(name, owner string, k int64) string {
	return suffixName(name, owner) + ":rwlock_timeout:" + itoa(k)
}
