package pubsub

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/internal/keyslot"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// The subscriber connections: the run loop that owns them, dials, (re)subscribes and backs
// off (see Mux).

// conn is one dedicated subscriber connection, to node (see routes).
type conn struct {
	node   string
	dc     rueidis.DedicatedClient
	broken <-chan error
}

// A breakage is a connection's end, reported to the run loop.
type breakage struct {
	c   *conn
	err error
}

// run owns the subscriber connection: it sends every SUBSCRIBE and UNSUBSCRIBE in order, so
// a channel left and re-joined in quick succession ends up subscribed, and it reconnects and
// re-subscribes after the connection breaks. The connection is dialled only when a channel
// needs it.
func (m *Mux) run() {
	defer close(m.done)
	var (
		cs      = map[string]*conn{} // by node
		broken  = make(chan breakage, 1)
		backoff time.Duration
		lost    bool // a connection broke, or a subscribe failed, since the last success
		retry   = time.NewTimer(time.Hour)
		linger  = time.NewTimer(time.Hour) // the earliest lingering channel is due
		reroute <-chan time.Time           // a Cluster's: time to check the channels' masters
	)
	retry.Stop()
	linger.Stop()
	if m.routes != nil {
		t := time.NewTicker(routeCheck)
		defer t.Stop()
		reroute = t.C
	}
	defer func() {
		for _, c := range cs {
			c.dc.Close()
		}
	}()
	drop := func(c *conn) {
		c.dc.Close()
		delete(cs, c.node)
		m.resetNode(c.node)
		if m.routes != nil {
			m.routes.stale() // the master may have failed over
		}
	}
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		case <-retry.C:
		case <-linger.C:
		case <-reroute:
			m.reroute(cs)
		case b := <-broken:
			if cs[b.c.node] != b.c {
				continue // one dropped already
			}
			if m.clientClosed(b.err) {
				return
			}
			m.log.Warn("pubsub connection lost; resubscribing", zap.Error(b.err), zap.String("node", b.c.node))
			drop(b.c)
			lost = true
		}
		c, err := m.sync(cs, broken)
		m.mu.Lock()
		next := m.next
		m.mu.Unlock()
		if !next.IsZero() {
			linger.Reset(time.Until(next))
		}
		if err == nil {
			if lost {
				m.log.Info("pubsub resubscribed")
			}
			backoff, lost = 0, false
			continue
		}
		if m.clientClosed(err) {
			return
		}
		select {
		case <-m.stop: // Close cancelled the command; nothing to retry or report
			return
		default:
		}
		if m.routes != nil && redirected(err) {
			m.routes.stale() // a slot moved: route again
		} else if c != nil && !isRedisErr(err) {
			drop(c)
		}
		backoff, lost = nextBackoff(backoff), true
		m.log.Warn("pubsub subscribe failed; retrying", zap.Error(err), zap.Duration("in", backoff))
		retry.Reset(backoff)
	}
}

func nextBackoff(d time.Duration) time.Duration {
	// At most half a second: after a failover, waiters are told to re-check once their
	// channels are subscribed again, and this is how late that may come.
	const lo, hi = 20 * time.Millisecond, 500 * time.Millisecond
	if d < lo {
		return lo
	}
	if d *= 2; d > hi {
		return hi
	}
	return d
}

// redirected reports whether err is a Cluster's MOVED or ASK.
func redirected(err error) bool {
	rerr, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	_, moved := rerr.IsMoved()
	_, ask := rerr.IsAsk()
	return moved || ask
}

func isRedisErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

// resetNode marks every channel subscribed on node unsubscribed and dirty, after its
// connection was lost.
func (m *Mux) resetNode(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, ch := range m.channels {
		if ch.node == node {
			ch.subscribed = false
			m.dirty[name] = struct{}{}
		}
	}
}

// dial connects to node ("": the client's one connection), which serves channel, reporting
// its end on broken.
func (m *Mux) dial(node, channel string, broken chan<- breakage) (*conn, error) {
	client := m.client
	if node != "" {
		if client = m.client.Nodes()[node]; client == nil {
			// A master the client has not met yet (a replica promoted): a read of the
			// channel's slot through the client has it learn the Cluster again.
			ctx, cancel := context.WithTimeout(m.ctx, m.timeout)
			_ = m.client.Do(ctx, m.client.B().Exists().Key(channel).Build()).Error()
			cancel()
			if client = m.client.Nodes()[node]; client == nil {
				m.routes.stale()
				return nil, fmt.Errorf("pubsub: the client knows no node %s", node)
			}
		}
	}
	dc, _ := client.Dedicate() // closed, not released: a pooled connection must not keep our hooks
	ends := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage:      m.onMessage,
		OnSubscription: m.onSubscription,
	})
	// A PING proves the connection before any channel is marked subscribed on it.
	ctx, cancel := context.WithTimeout(m.ctx, m.timeout)
	defer cancel()
	if err := dc.Do(ctx, dc.B().Ping().Build()).Error(); err != nil {
		dc.Close()
		return nil, err
	}
	c := &conn{node: node, dc: dc, broken: ends}
	go func() {
		select {
		case err := <-ends:
			select {
			case broken <- breakage{c, err}:
			case <-m.stop:
			}
		case <-m.stop:
		}
	}()
	return c, nil
}

// maxChannelsPerCommand bounds one SUBSCRIBE so a burst of new channels is sent in a few
// commands, not one command per channel and not one unbounded command.
const maxChannelsPerCommand = 512

// sync brings the subscriptions in line with the waiters of every dirty channel, dialling a
// master's connection first if a channel must be joined there. On error the unfinished
// channels stay dirty, and the connection the error came from, if any, is returned.
func (m *Mux) sync(cs map[string]*conn, broken chan<- breakage) (*conn, error) {
	m.mu.Lock()
	var join []string
	var leave []batch
	now := time.Now()
	m.next = time.Time{}
	for name := range m.dirty {
		ch := m.channels[name]
		switch {
		case ch == nil:
		case ch.wanted() && !ch.subscribed:
			join = append(join, name)
		case ch.wanted():
		case ch.subscribed && now.Sub(ch.idle) < m.linger:
			// lingering: stays dirty, to be left when due
			if due := ch.idle.Add(m.linger); m.next.IsZero() || due.Before(m.next) {
				m.next = due
			}
			continue
		case ch.subscribed:
			leave = m.add(leave, ch.node, name)
		default:
			m.deleteLocked(ch)
		}
		delete(m.dirty, name)
	}
	m.mu.Unlock()

	for i, b := range leave {
		if c := cs[b.node]; c != nil {
			if err := m.send(c, false, b.names); err != nil {
				m.unfinished(leave[i:])
				m.redirty(join)
				return c, err
			}
		} // else its connection is gone, and the subscriptions with it
		m.mu.Lock()
		for _, name := range b.names {
			if ch := m.channels[name]; ch != nil {
				ch.subscribed = false
				if !ch.wanted() {
					m.deleteLocked(ch)
				} else {
					m.markDirty(name) // re-joined while we were leaving
				}
			}
		}
		m.mu.Unlock()
	}

	var joins []batch
	for _, name := range join {
		node := ""
		if m.routes != nil {
			ctx, cancel := context.WithTimeout(m.ctx, m.timeout)
			var err error
			node, err = m.routes.node(ctx, name)
			cancel()
			if err != nil {
				m.redirty(join)
				return nil, err
			}
		}
		joins = m.add(joins, node, name)
	}
	for i, b := range joins {
		c := cs[b.node]
		var err error
		if c == nil {
			if c, err = m.dial(b.node, b.names[0], broken); err == nil {
				cs[b.node] = c
			}
		}
		if err == nil {
			err = m.send(c, true, b.names)
		}
		if err != nil {
			m.unfinished(joins[i:])
			return c, err
		}
		m.mu.Lock()
		for _, name := range b.names {
			if ch := m.channels[name]; ch != nil {
				ch.subscribed, ch.node = true, b.node
				wakeN(ch, All)
				if !ch.wanted() {
					m.markDirty(name) // everyone left while we were joining
				}
			}
		}
		m.mu.Unlock()
	}
	return nil, nil
}

// A batch is channels one (S)SUBSCRIBE or (S)UNSUBSCRIBE takes: on one node, of one slot on
// a Cluster (a shard command's channels must share it), and at most maxChannelsPerCommand.
type batch struct {
	node  string
	slot  int
	names []string
}

// add puts names, on node, in the batches bs.
func (m *Mux) add(bs []batch, node string, names ...string) []batch {
next:
	for _, name := range names {
		slot := -1
		if m.routes != nil {
			slot = int(keyslot.Of(name))
		}
		for i := range bs {
			if b := &bs[i]; b.node == node && b.slot == slot && len(b.names) < maxChannelsPerCommand {
				b.names = append(b.names, name)
				continue next
			}
		}
		bs = append(bs, batch{node: node, slot: slot, names: []string{name}})
	}
	return bs
}

// unfinished marks the channels of batches whose commands were not sent dirty again.
func (m *Mux) unfinished(bs []batch) {
	for _, b := range bs {
		m.redirty(b.names)
	}
}

func (m *Mux) redirty(names []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range names {
		m.dirty[name] = struct{}{}
	}
}

// send issues one (S)SUBSCRIBE or (S)UNSUBSCRIBE; rueidis returns once the server has
// confirmed every channel in it. Should rueidis panic on the command, the panic is an
// error: this goroutine is no caller's to recover.
func (m *Mux) send(c *conn, join bool, names []string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pubsub: command refused by the client: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(m.ctx, m.timeout)
	defer cancel()
	b := c.dc.B()
	var cmd rueidis.Completed
	switch {
	case join && m.mode == Sharded:
		cmd = b.Ssubscribe().Channel(names...).Build()
	case join:
		cmd = b.Subscribe().Channel(names...).Build()
	case m.mode == Sharded:
		cmd = b.Sunsubscribe().Channel(names...).Build()
	default:
		cmd = b.Unsubscribe().Channel(names...).Build()
	}
	return c.dc.Do(ctx, cmd).Error()
}

// routeCheck is how often a Sharded Mux of a Cluster checks that its channels are
// subscribed on the masters serving their slots: a master that hands its slots over (a
// manual failover) may not tell its subscribers.
const routeCheck = 2 * time.Second

// reroute reads the slot map again and moves every channel subscribed on a node that no
// longer serves its slot: unsubscribed there, and subscribed again by the next sync.
func (m *Mux) reroute(cs map[string]*conn) {
	m.mu.Lock()
	on := make(map[string]string) // subscribed channel → its node
	for name, ch := range m.channels {
		if ch.subscribed {
			on[name] = ch.node
		}
	}
	m.mu.Unlock()
	if len(on) == 0 {
		return
	}
	m.routes.stale()
	moved := map[string][]string{} // old node → channels
	for name, node := range on {
		ctx, cancel := context.WithTimeout(m.ctx, m.timeout)
		now, err := m.routes.node(ctx, name)
		cancel()
		if err != nil {
			return // the next check, or a failure of the connection, tries again
		}
		if now != node {
			moved[node] = append(moved[node], name)
		}
	}
	for node, names := range moved {
		if c := cs[node]; c != nil {
			for _, b := range m.add(nil, node, names...) {
				_ = m.send(c, false, b.names) // a node that no longer serves them may refuse
			}
		}
		m.mu.Lock()
		for _, name := range names {
			if ch := m.channels[name]; ch != nil && ch.subscribed && ch.node == node {
				ch.subscribed = false
				m.markDirty(name)
			}
		}
		m.mu.Unlock()
		m.log.Info("pubsub channels moved to the masters now serving their slots", zap.String("from", node), zap.Int("channels", len(names)))
	}
}
