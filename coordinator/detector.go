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
	// ttl is the registration's lease TTL when its silence is timed.
	ttl time.Duration
}

// revokeGrace is how long after a silent verdict plus the lease's TTL the
// leader waits for the node's key to go before it counts the verdict
// premature: etcd revokes expired leases on a 500 ms tick, then the
// deletion goes through raft and the watch.
const revokeGrace = time.Second

// verdict is a silent verdict the leader keeps until it learns whether
// the lease had expired (the registration went) or not (it stayed).
type verdict struct {
	rev int64
	at  time.Time
	ttl time.Duration
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
	// verdicts are the silent verdicts whose outcome is not known yet.
	verdicts map[string]verdict
	wg       sync.WaitGroup
}

func newDetector(ctx context.Context, lv liveness, log *slog.Logger, m *metrics) *detector {
	ctx, cancel := context.WithCancel(ctx)
	return &detector{lv: lv, log: log, metrics: m, ctx: ctx, cancel: cancel,
		events:   make(chan nodeEvent, 16),
		watches:  map[string]*nodeWatch{},
		h:        health{dead: map[string]death{}, suspect: map[string]int64{}, silent: map[string]death{}},
		verdicts: map[string]verdict{},
	}
}

// sync makes the watches follow the registrations in s: a watch per node
// with an address, except a registration already confirmed dead (nothing
// more to learn of it); a watch whose registration changed or went ends.
// What was learned of registrations no longer in s is forgotten.
//
// A silent verdict whose registration went was right: its lease expired.
// One whose registration is still in s a TTL and revokeGrace after the
// verdict was premature: the lease was renewed meanwhile, the node alive
// (counted, logged).
func (d *detector) sync(s cluster.Snapshot) {
	now := d.lv.clock.Now()
	for id, v := range d.verdicts {
		n, ok := s.Nodes[id]
		switch {
		case !ok || n.Revision != v.rev:
			delete(d.verdicts, id)
		case now.Sub(v.at) >= v.ttl+revokeGrace:
			delete(d.verdicts, id)
			d.metrics.premature.Inc()
			_, stillSilent := d.h.silent[id]
			d.log.Warn("premature silent verdict: the node's registration outlived its lease's TTL after it; its channels moved needlessly",
				"node", id, "verdict_at", v.at, "lease_ttl", v.ttl, "still_silent", stillSilent)
		}
	}
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
	for id, silent := range d.h.silent {
		if n, ok := s.Nodes[id]; !ok || n.Revision != silent.rev {
			delete(d.h.silent, id)
		}
	}
	for id, n := range s.Nodes {
		if _, ok := d.watches[id]; ok || n.Value.Addr == "" {
			continue
		}
		if _, dead := d.h.dead[id]; dead {
			continue
		}
		reg := registration{node: id, addr: n.Value.Addr}
		if n.Value.LeaseTTL > 0 && n.Lease != 0 {
			reg.lease, reg.ttl = n.Lease, time.Duration(n.Value.LeaseTTL)*time.Second
		}
		d.start(n.Revision, reg)
	}
	d.gauge()
}

func (d *detector) start(rev int64, reg registration) {
	ctx, cancel := context.WithCancel(d.ctx)
	d.watches[reg.node] = &nodeWatch{rev: rev, addr: reg.addr, ttl: reg.ttl, cancel: cancel}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.lv.watch(ctx, reg, func(kind eventKind, at, since time.Time) {
			select {
			case d.events <- nodeEvent{node: reg.node, rev: rev, kind: kind, at: at, since: since}:
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
		d.heard(ev, w)
	case eventHeard:
		d.heard(ev, w)
	case eventSilent:
		d.h.silent[ev.node] = death{rev: ev.rev, at: ev.at}
		d.verdicts[ev.node] = verdict{rev: ev.rev, at: ev.at, ttl: w.ttl}
		d.metrics.silences.WithLabelValues(silenceSilent).Inc()
		d.log.Warn("node silent for its lease: nothing on its liveness stream, its socket empty; taken as its lease's expiry",
			"node", ev.node, "addr", w.addr, "silent_for", ev.at.Sub(ev.since), "lease_ttl", w.ttl)
	case eventSuspect:
		w.alive = false
		d.h.suspect[ev.node] = ev.rev
		d.log.Info("node suspect: no liveness stream, no proof of death", "node", ev.node, "addr", w.addr)
	case eventDead:
		delete(d.watches, ev.node)
		delete(d.h.suspect, ev.node)
		delete(d.h.silent, ev.node)
		d.h.dead[ev.node] = death{rev: ev.rev, at: ev.at}
		d.metrics.deadNodes.Inc()
		d.metrics.detect.Observe(ev.at.Sub(ev.since).Seconds())
		d.log.Warn("node process gone: its address refuses connections", "node", ev.node, "addr", w.addr,
			"since_last_sign", ev.at.Sub(ev.since))
	}
	d.gauge()
}

// heard ends a silence: the node spoke again.
func (d *detector) heard(ev nodeEvent, w *nodeWatch) {
	if silent, ok := d.h.silent[ev.node]; ok {
		delete(d.h.silent, ev.node)
		d.log.Info("node silent until now spoke again: live again", "node", ev.node, "addr", w.addr,
			"since_verdict", ev.at.Sub(silent.at))
	}
}

func (d *detector) gauge() {
	alive := 0
	for id, w := range d.watches {
		if _, silent := d.h.silent[id]; w.alive && !silent {
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
	return health{dead: maps.Clone(d.h.dead), suspect: maps.Clone(d.h.suspect), silent: maps.Clone(d.h.silent)}
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
