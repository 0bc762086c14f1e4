package names

import "testing"

// Go and Java name the same keys: Redisson's own names for a plain and a tagged name.
func TestNamesAsRedisson(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Prefix("redisson_lock__channel", "stock"), "redisson_lock__channel:{stock}"},
		{Prefix("redisson_lock__channel", "{user:1}:stock"), "redisson_lock__channel:{user:1}:stock"},
		{Suffix("stock", "timeout"), "{stock}:timeout"},
		{Suffix("{user:1}:stock", "timeout"), "{user:1}:stock:timeout"},
		{LatchChannel("{jobs}"), "redisson_countdownlatch__channel__{{jobs}}"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
