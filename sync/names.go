package sync

import "strings"

// Redisson derives every key and channel of an object from its name so that all of them
// share the name's hash slot: a name without '{' is wrapped as a hash tag, a name with one is
// trusted to carry its own tag. The test is only "contains '{'", exactly as Redisson does it
// (docs/redisson-interop.md, names), or Go and Java would name different keys.

// prefixName is Redisson's RedissonObject.prefixName.
func prefixName(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// suffixName is Redisson's RedissonObject.suffixName.
func suffixName(name, suffix string) string {
	if strings.Contains(name, "{") {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

const (
	lockChannelPrefix = "redisson_lock__channel"
	unlockLatchPrefix = "redisson_unlock_latch"

	semaphoreChannelPrefix = "redisson_sc"
)

// latchChannel is a countdown latch's channel. Redisson builds it by concatenation, always
// adding braces, not with prefixName: for a name with its own hash tag
// the channel hashes elsewhere.
func latchChannel(name string) string { return "redisson_countdownlatch__channel__{" + name + "}" }
