package node

import (
	"context"
	"sync"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
)

// keys remembers the outcome of recent appends of one channel by
// idempotency key, and which are in flight, so that a retry on the same
// owner is answered without reading the log. It forgets the oldest beyond
// its capacity (a retry of a forgotten key reads the log instead). Safe for
// concurrent use.
type keys struct {
	mu       sync.Mutex
	cap      int
	done     map[string]*streamwalv1.AppendResponse
	order    []string // done's keys, oldest first (a ring once full)
	next     int
	inflight map[string]chan struct{} // closed when the attempt ends
}

func newKeys(capacity int) *keys {
	return &keys{cap: capacity, done: map[string]*streamwalv1.AppendResponse{}, inflight: map[string]chan struct{}{}}
}

// begin claims key for an attempt: the stored answer if the key is known,
// or a channel to wait on while another attempt holds it; otherwise the
// caller holds the key until end.
func (k *keys) begin(key string) (known *streamwalv1.AppendResponse, wait <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r, ok := k.done[key]; ok {
		return r, nil
	}
	if ch, ok := k.inflight[key]; ok {
		return nil, ch
	}
	k.inflight[key] = make(chan struct{})
	return nil, nil
}

// end releases key; res, when non-nil, is its stored answer.
func (k *keys) end(key string, res *streamwalv1.AppendResponse) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ch, ok := k.inflight[key]; ok {
		close(ch)
		delete(k.inflight, key)
	}
	if res == nil {
		return
	}
	if _, ok := k.done[key]; ok {
		return
	}
	k.done[key] = res
	if len(k.order) < k.cap {
		k.order = append(k.order, key)
		return
	}
	delete(k.done, k.order[k.next])
	k.order[k.next] = key
	k.next = (k.next + 1) % k.cap
}

// acquire claims key, waiting out attempts in flight; it returns the stored
// answer if one exists by then.
func (k *keys) acquire(ctx context.Context, key string) (*streamwalv1.AppendResponse, error) {
	for {
		known, wait := k.begin(key)
		if wait == nil {
			return known, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
