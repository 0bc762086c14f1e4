package pubsub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/latchkey/latchkey/internal/keyslot"
	"github.com/redis/rueidis"
)

// Sharded pub/sub on a Cluster: a shard channel is subscribed on the master serving its
// slot, so a Sharded Mux of a Cluster client holds a connection per master, and routes each
// channel by its slot. The slot map is read from the Cluster (CLUSTER SLOTS) when first
// needed, and again after a redirection, a lost connection or a channel the server dropped
// (its slot moved): a failover or a migration moves channels to another master.

// routes maps slots to the masters serving them. Safe for concurrent use.
type routes struct {
	client rueidis.Client

	mu    sync.Mutex
	nodes []string // by slot; nil until read, or once stale
}

// stale has the slot map read again before the next route.
func (r *routes) stale() {
	r.mu.Lock()
	r.nodes = nil
	r.mu.Unlock()
}

// node returns the master serving channel's slot, reading the slot map if need be.
func (r *routes) node(ctx context.Context, channel string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nodes == nil {
		nodes, err := readSlots(ctx, r.client)
		if err != nil {
			return "", err
		}
		r.nodes = nodes
	}
	if n := r.nodes[keyslot.Of(channel)]; n != "" {
		return n, nil
	}
	r.nodes = nil // a slot no master serves: a failover under way
	return "", fmt.Errorf("pubsub: no master serves the slot of %q", channel)
}

// readSlots reads which master serves each slot, from the first of the client's nodes
// that answers.
func readSlots(ctx context.Context, c rueidis.Client) ([]string, error) {
	var errs []error
	for addr, node := range c.Nodes() {
		// A node down (a failed master the client still knows) may hang rather than refuse:
		// it gets a share of ctx, not all of it.
		nctx, cancel := context.WithTimeout(ctx, time.Second)
		ranges, err := node.Do(nctx, node.B().ClusterSlots().Build()).ToArray()
		cancel()
		if err == nil {
			return slotMap(addr, ranges)
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, fmt.Errorf("pubsub: CLUSTER SLOTS: %w", errors.Join(errs...))
}

// slotMap reads CLUSTER SLOTS's ranges, as from the node at from: a master without a host
// is at from's.
func slotMap(from string, ranges []rueidis.RedisMessage) ([]string, error) {
	fromHost, _, _ := net.SplitHostPort(from)
	nodes := make([]string, keyslot.Count)
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("pubsub: CLUSTER SLOTS: a range %v", r)
		}
		first, err1 := f[0].AsInt64()
		last, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || first < 0 || last >= keyslot.Count {
			return nil, fmt.Errorf("pubsub: CLUSTER SLOTS: a range %v", r)
		}
		host, _ := master[0].ToString()
		if host == "" {
			host = fromHost
		}
		port, err := master[1].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("pubsub: CLUSTER SLOTS: a master %v", master)
		}
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		for s := first; s <= last; s++ {
			nodes[s] = addr
		}
	}
	return nodes, nil
}
