package s3

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"
)

// slotKey names an object of a channel.
type slotKey struct{ epoch, slot uint64 }

// fetched is what a slot was found to hold: an object (data or fence) or
// an error naming its key (a corrupt object).
type fetched struct {
	obj *object
	err error
}

// hub is what the WALs of one channel in one Opener share: the newest
// manifest any of them saw, the objects their writer acknowledged lately
// (so that their scanners get them without a GET), and one poller that
// looks for the slots tailing scanners wait for, at most every
// PollInterval, while one waits.
type hub struct {
	o    *Opener
	name string
	refs int // WALs of the channel; guarded by o.mu

	mu      sync.Mutex
	man     *manifest
	objs    map[slotKey]fetched
	order   []slotKey // objs, oldest first
	bytes   int
	readers int // live scanners: objects are kept only for them
	waits   map[slotKey]int
	wantMan int
	changed chan struct{}
	polling bool
	closed  bool
	// own is set while a writer of the Opener writes epoch ownEpoch and
	// will hand its flushes over: slots from ownNext on are not looked
	// for in the store.
	own      bool
	ownEpoch uint64
	ownNext  uint64

	// ctx ends the poller's requests and waits: cancelled by close.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newHub(o *Opener, name string) *hub {
	h := &hub{o: o, name: name, objs: map[slotKey]fetched{}, waits: map[slotKey]int{}, changed: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// broadcast wakes every waiting scanner. Assumes h.mu is held.
func (h *hub) broadcast() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// noteManifest keeps m when it is newer than what the hub has.
func (h *hub) noteManifest(m *manifest) {
	if m == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.man == nil || m.Rev > h.man.Rev {
		h.man = m
		h.broadcast()
	}
}

// manifest returns the newest manifest the hub saw.
func (h *hub) manifest() *manifest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.man
}

// setOwn records the Opener's writer of epoch e; dropOwn forgets it when
// it stops handing flushes over (failed, fenced or closed).
func (h *hub) setOwn(e uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.own, h.ownEpoch, h.ownNext = true, e, 0
}

func (h *hub) dropOwn(e uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.own && h.ownEpoch == e {
		h.own = false
		h.broadcast()
	}
}

// awaitsOwn reports whether slot k is one the Opener's writer has not
// handed over yet, and will. Assumes h.mu is held.
func (h *hub) awaitsOwnLocked(k slotKey) bool {
	return h.own && k.epoch == h.ownEpoch && k.slot >= h.ownNext
}

// awaitsOwn is awaitsOwnLocked for callers without the lock.
func (h *hub) awaitsOwn(k slotKey) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.awaitsOwnLocked(k)
}

// publish keeps an object for the scanners (the writer's acknowledged
// flushes, what the poller found).
//
// obj nil says only that the slot is acknowledged (no scanner was there
// to want it decoded): a scanner that comes later GETs it.
func (h *hub) publish(epoch, slot uint64, obj *object) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.own && h.ownEpoch == epoch && slot >= h.ownNext {
		h.ownNext = slot + 1
	}
	if obj == nil || h.readers == 0 || h.closed {
		return
	}
	h.keepLocked(slotKey{epoch, slot}, fetched{obj: obj})
	h.broadcast()
}

// keepLocked adds an entry, dropping the oldest beyond the budget.
// Assumes h.mu is held.
func (h *hub) keepLocked(k slotKey, f fetched) {
	if old, ok := h.objs[k]; ok {
		h.bytes -= sizeOf(old)
	} else {
		h.order = append(h.order, k)
	}
	h.objs[k] = f
	h.bytes += sizeOf(f)
	limit, maxObjs := h.o.cfg.ReadAheadBytes, 2*h.o.cfg.ReadAhead+8
	for len(h.order) > 1 && (h.bytes > limit || len(h.order) > maxObjs) {
		old := h.order[0]
		h.order = h.order[1:]
		h.bytes -= sizeOf(h.objs[old])
		delete(h.objs, old)
	}
}

func sizeOf(f fetched) int {
	if f.obj == nil {
		return 0
	}
	return f.obj.size
}

// lookup returns what the hub holds for a slot.
func (h *hub) lookup(k slotKey) (fetched, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, ok := h.objs[k]
	return f, ok
}

// hasReaders reports whether a scanner of the Opener is live: the writer
// decodes what it flushed for them only then.
func (h *hub) hasReaders() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.readers > 0 && !h.closed
}

// addReader and dropReader count live scanners.
func (h *hub) addReader() {
	h.mu.Lock()
	h.readers++
	h.mu.Unlock()
}

func (h *hub) dropReader() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readers--
	if h.readers == 0 {
		clear(h.objs)
		h.order, h.bytes = nil, 0
	}
}

// wait registers a scanner waiting for slot k (and for a fresh manifest
// when wantManifest) and returns the channel that closes on the next
// change, and the function that ends the wait.
func (h *hub) wait(k slotKey, wantManifest bool) (<-chan struct{}, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waits[k]++
	if wantManifest {
		h.wantMan++
	}
	if !h.polling && !h.closed {
		h.polling = true
		h.wg.Add(1)
		go h.poll()
	}
	return h.changed, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.waits[k]--; h.waits[k] == 0 {
			delete(h.waits, k)
		}
		if wantManifest {
			h.wantMan--
		}
	}
}

// manifestEvery is how many polls read the manifest once.
const manifestEvery = 5

// poll looks for the awaited slots (and the manifest, when a scanner
// wants it) every PollInterval while a scanner waits.
func (h *hub) poll() {
	defer h.wg.Done()
	ctx := h.ctx
	for round := 1; ; round++ {
		select {
		case <-h.o.clock.After(h.o.cfg.PollInterval):
		case <-ctx.Done():
			return
		}
		h.mu.Lock()
		var keys []slotKey
		for k := range h.waits {
			if _, ok := h.objs[k]; !ok && !h.awaitsOwnLocked(k) {
				keys = append(keys, k)
			}
		}
		// The manifest too when a scanner wants it (it met a fence), and
		// every manifestEvery rounds: a truncation or a Delete elsewhere
		// may have overtaken a waiting scanner.
		wantMan := h.wantMan > 0
		if len(h.waits) == 0 && !wantMan {
			h.polling = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		wantMan = wantMan || round%manifestEvery == 0
		for _, k := range keys {
			f, ok := h.fetch(ctx, k)
			if !ok {
				continue
			}
			if f.obj != nil && f.obj.kind == kindFence {
				wantMan = true
			}
			h.mu.Lock()
			h.keepLocked(k, f)
			h.broadcast()
			h.mu.Unlock()
		}
		if wantMan {
			if m, _, err := h.o.getManifest(ctx, h.name); err == nil {
				h.noteManifest(m)
			} else if errors.Is(err, errNotFound) {
				h.noteManifest(&manifest{Deleted: true, Rev: ^uint64(0)})
			}
		}
	}
}

// fetch GETs a slot; ok is false when it is missing (or the GET failed:
// the next poll tries again).
func (h *hub) fetch(ctx context.Context, k slotKey) (fetched, bool) {
	key := h.o.keys.slot(h.name, k.epoch, k.slot)
	body, _, err := h.o.st.get(ctx, key)
	if err != nil {
		if !errors.Is(err, errNotFound) && ctx.Err() == nil {
			h.o.log.Debug("poll failed", "channel", h.name, "key", key, "err", err)
		}
		return fetched{}, false
	}
	obj, err := decodeObject(key, body, k.epoch, k.slot)
	if err != nil {
		return fetched{err: err}, true
	}
	return fetched{obj: obj}, true
}

// close stops the poller and waits for it.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}
