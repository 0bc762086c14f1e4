package sync

import (
	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
)

// waitingClients is how the waiters of a plain lock or a semaphore reach other Clients: a
// Client with waiters registers in the zset clients (see lib.lua's wait_here), and its
// waiters listen on a channel of its own, clientCh, where a change that may serve them wakes
// one Client alone. One waiting Client, the listener (its token in the key listener), also
// hears the primitive's Redisson channel, for what Java publishes, and passes it to its own
// waiters by policy.
type waitingClients struct {
	channel  string // the primitive's channel, Redisson's
	clients  string // the zset of waiting Clients
	clientCh string // the channel this Client's waiters listen on
	listener string // the key naming the listener Client (see lib.lua's listen)
	policy   pubsub.Policy
}

func newWaitingClients(c *Client, channel, clients string, policy pubsub.Policy) waitingClients {
	return waitingClients{channel: channel, clients: clients, clientCh: clients + ":" + c.lockToken,
		listener: clients + ":listener", policy: policy}
}

// afterLeave follows the Client's leave (its last waiter gone, its registration dropped): with no
// waiter now it stops listening, and a waiter that came meanwhile attempts, to register the
// Client again.
func (w *waitingClients) afterLeave(c *Client) {
	if c.mux.Waiters(w.clientCh) == 0 {
		c.mux.Unforward(w.channel)
	}
	c.mux.Wake(w.clientCh)
}

// heard follows what a registering attempt's reply says of the Client's listening: listen,
// it is the listener; or it took, and with others (waiters left) kept its registration.
func (w *waitingClients) heard(c *Client, listen, took, others bool) {
	// The listener role may come to this Client by a message on its channel (see lib.lua's
	// resign).
	c.mux.Cue(w.clientCh, "00", w.channel, w.policy)
	switch {
	case listen:
		_ = c.mux.Forward(w.channel, w.clientCh, w.policy)
	case !took || !others:
		c.mux.Unforward(w.channel) // another Client listens, or this one resigned
	}
}

// leaving is what the Client sends as its last waiter on an object gives up.
func (c *Client) leaving() lua.Leaving {
	return lua.Leaving{Token: c.lockToken, Publish: c.publishCmd, RegMs: c.fairWaitMs}
}
