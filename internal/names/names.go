// Package names derives the keys and channels of a Redisson object from its name, as
// Redisson does (docs/redisson-interop.md, names), for the sync package and the latchkey
// command, which must name the same keys.
//
// Every key and channel of an object shares the name's hash slot: a name without '{' is
// wrapped as a hash tag, a name with one is trusted to carry its own tag. The test is only
// "contains '{'", exactly as Redisson does it, or Go and Java would name different keys.
package names

import "strings"

// Prefix is Redisson's RedissonObject.prefixName: "<prefix>:{name}", or "<prefix>:name" when
// the name carries its own hash tag.
func Prefix(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// Suffix is Redisson's RedissonObject.suffixName: "{name}:<suffix>", or "name:<suffix>".
func Suffix(name, suffix string) string {
	if strings.Contains(name, "{") {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

// LatchChannel is a countdown latch's channel. Redisson builds it by concatenation, always
// adding braces, not with Prefix: for a name with its own hash tag the channel hashes
// elsewhere.
func LatchChannel(name string) string { return "redisson_countdownlatch__channel__{" + name + "}" }
