package coordinator

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/streamwal/streamwal/cluster"
)

// nodeEvent is what a watch learned about one registration of a node.
type nodeEvent struct {
	node string
	rev  int64 // the node key's ModRevision the watch follows
	kind eventKind
	at   time.Time
	// since is the first sign of an eventDead: the end of the last
	// liveness stream, or the start of the watch.
	since time.Time
}

// nodeWatch is one running watch.
type nodeWatch struct {
	rev    int64
	addr   string
	cancel context.CancelFunc
	alive  bool
}

// detector is the leader's failure detection: one watch (liveness.go) per
// registered node with an address, and what they learned (health, the
// input of decide). It is owned by the goroutine in lead: sync, note,
// health and stop are called there only. Each watch is a goroutine of its
// own that reports through events; sync ends the watches of registrations
// that are gone, and stop ends them all and waits for them.
type detector struct {
	lv      liveness
	log     *slog.Logger
	metrics *metrics
	ctx     context.Context
	cancel  context.CancelFunc

	events  chan nodeEvent
	watches map[string]*nodeWatch // by node ID
	h       health
	wg      sync.WaitGroup
}

func newDetector(ctx context.Context, lv liveness, log *slog.Logger, m *metrics) *detector {
	ctx, cancel := context.WithCancel(ctx)
	return &detector{lv: lv, log: log, metrics: m, ctx: ctx, cancel: cancel,
		events:  make(chan nodeEvent, 16),
		watches: map[string]*nodeWatch{},
		h:       health{dead: map[string]death{}, suspect: map[string]int64{}},
	}
}

// sync makes the watches follow the registrations in s: a watch per node
// with an address, except a registration already confirmed dead (nothing
// more to learn of it); a watch whose registration changed or went ends.
// What was learned of registrations no longer in s is forgotten.
func (d *detector) sync(s cluster.Snapshot) {
	for id, w := range d.watches {
		if n, ok := s.Nodes[id]; !ok || n.Revision != w.rev || n.Value.Addr != w.addr {
			w.cancel()
			delete(d.watches, id)
		}
	}
	for id, dead := range d.h.dead {
		if n, ok := s.Nodes[id]; !ok || n.Revision != dead.rev {
			delete(d.h.dead, id)
		}
	}
	for id, rev := range d.h.suspect {
		if n, ok := s.Nodes[id]; !ok || n.Revision != rev {
			delete(d.h.suspect, id)
		}
	}
	for id, n := range s.Nodes {
		if _, ok := d.watches[id]; ok || n.Value.Addr == "" {
			continue
		}
		if _, dead := d.h.dead[id]; dead {
			continue
		}
		d.start(id, n.Revision, n.Value.Addr)
	}
	d.gauge()
}

func (d *detector) start(id string, rev int64, addr string) {
	ctx, cancel := context.WithCancel(d.ctx)
	d.watches[id] = &nodeWatch{rev: rev, addr: addr, cancel: cancel}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.lv.watch(ctx, id, addr, func(kind eventKind, at, since time.Time) {
			select {
			case d.events <- nodeEvent{node: id, rev: rev, kind: kind, at: at, since: since}:
			case <-ctx.Done():
			}
		})
	}()
}

// note applies an event of a watch that still runs (an ended watch's is
// dropped).
func (d *detector) note(ev nodeEvent) {
	w, ok := d.watches[ev.node]
	if !ok || w.rev != ev.rev {
		return
	}
	switch ev.kind {
	case eventAlive:
		w.alive = true
		delete(d.h.suspect, ev.node)
	case eventSuspect:
		w.alive = false
		d.h.suspect[ev.node] = ev.rev
		d.log.Info("node suspect: no liveness stream, no proof of death", "node", ev.node, "addr", w.addr)
	case eventDead:
		delete(d.watches, ev.node)
		delete(d.h.suspect, ev.node)
		d.h.dead[ev.node] = death{rev: ev.rev, at: ev.at}
		d.metrics.deadNodes.Inc()
		d.metrics.detect.Observe(ev.at.Sub(ev.since).Seconds())
		d.log.Warn("node process gone: its address refuses connections", "node", ev.node, "addr", w.addr,
			"since_last_sign", ev.at.Sub(ev.since))
	}
	d.gauge()
}

func (d *detector) gauge() {
	alive := 0
	for _, w := range d.watches {
		if w.alive {
			alive++
		}
	}
	d.metrics.streams.Set(float64(alive))
	d.metrics.suspects.Set(float64(len(d.h.suspect)))
}

// health returns what the detector knows, for one decision.
func (d *detector) health() health {
	if d == nil {
		return health{}
	}
	return health{dead: maps.Clone(d.h.dead), suspect: maps.Clone(d.h.suspect)}
}

// eventsChan returns the channel the watches report on (nil without a
// detector: a select never takes it).
func (d *detector) eventsChan() <-chan nodeEvent {
	if d == nil {
		return nil
	}
	return d.events
}

// stop ends every watch and waits for them.
func (d *detector) stop() {
	d.cancel()
	d.wg.Wait()
	d.metrics.streams.Set(0)
	d.metrics.suspects.Set(0)
}
