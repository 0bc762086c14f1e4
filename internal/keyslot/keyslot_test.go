package keyslot

import "testing"

func TestOf(t *testing.T) {
	// Expected values are from CLUSTER KEYSLOT on Redis 7 and the Redis Cluster specification.
	cases := []struct {
		key  string
		slot uint16
	}{
		{"123456789", 12739}, // the specification's CRC16 check value 0x31C3 mod 16384
		{"foo", 12182},
		{"orders", Of("{orders}:x")},
		{"{user1000}.following", Of("user1000")},
		{"foo{}{bar}", Of("foo{}{bar}")}, // empty tag: the whole key is hashed
		{"foo{{bar}}zap", Of("{bar")},
		{"a{b", Of("a{b")},
	}
	for _, c := range cases {
		if got := Of(c.key); got != c.slot {
			t.Errorf("Of(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
	if Of("foo{}{bar}") == Of("bar") {
		t.Errorf("an empty tag must not fall through to the next tag")
	}
}
