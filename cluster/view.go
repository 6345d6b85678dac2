package cluster

import (
	"context"
	"log/slog"
	"maps"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/utility/backoff"
)

// Versioned is a decoded value with its etcd metadata.
type Versioned[T any] struct {
	Value T
	// Revision is the key's ModRevision: the condition of a write that
	// expects nobody changed it since.
	Revision int64
	// Lease is the lease the key is attached to (0: none).
	Lease int64
}

// Snapshot is the cluster as a View last saw it, at one etcd revision.
type Snapshot struct {
	Revision    int64
	Nodes       map[string]Versioned[NodeInfo]
	Assignments map[string]Versioned[Assignment]
	Opened      map[string]Versioned[Opened]
	Moves       map[string]Versioned[MoveRequest]
	Migrations  map[string]Versioned[MigrateRequest]
	Drains      map[string]Versioned[DrainRequest]
}

// Owner returns the node that owns channel and its assignment, if the
// channel is assigned to a live node.
func (s Snapshot) Owner(channel string) (Assignment, NodeInfo, bool) {
	a, ok := s.Assignments[channel]
	if !ok {
		return Assignment{}, NodeInfo{}, false
	}
	n, ok := s.Nodes[a.Value.Node]
	return a.Value, n.Value, ok
}

func emptySnapshot() Snapshot {
	return Snapshot{
		Nodes:       map[string]Versioned[NodeInfo]{},
		Assignments: map[string]Versioned[Assignment]{},
		Opened:      map[string]Versioned[Opened]{},
		Moves:       map[string]Versioned[MoveRequest]{},
		Migrations:  map[string]Versioned[MigrateRequest]{},
		Drains:      map[string]Versioned[DrainRequest]{},
	}
}

func (s Snapshot) clone() Snapshot {
	return Snapshot{
		Revision:    s.Revision,
		Nodes:       maps.Clone(s.Nodes),
		Assignments: maps.Clone(s.Assignments),
		Opened:      maps.Clone(s.Opened),
		Moves:       maps.Clone(s.Moves),
		Migrations:  maps.Clone(s.Migrations),
		Drains:      maps.Clone(s.Drains),
	}
}

// View follows a cluster's keys in etcd: it lists them once, then applies
// a watch from the revision of the list, listing again when the watch is
// compacted away or its member loses the leader. A value that does not
// decode is logged and left out. Safe for concurrent use.
type View struct {
	cli    *clientv3.Client
	layout Layout
	log    *slog.Logger

	mu      sync.Mutex
	snap    Snapshot
	changed chan struct{} // closed and replaced on every change
	closed  bool

	cancel context.CancelFunc
	done   chan struct{}
}

// Watch lists the cluster under layout and follows it until Close. The
// caller owns cli.
func Watch(ctx context.Context, cli *clientv3.Client, layout Layout, logger *slog.Logger) (*View, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	v := &View{cli: cli, layout: layout, log: logger, changed: make(chan struct{}), done: make(chan struct{})}
	snap, err := v.list(ctx)
	if err != nil {
		return nil, err
	}
	v.snap = snap
	wctx, cancel := context.WithCancel(context.Background())
	v.cancel = cancel
	go v.run(wctx)
	return v, nil
}

// Load reads every key of the cluster under layout at one revision, as a
// View's first list does: a value that does not decode is logged and left
// out. It is the fresh snapshot of a decision that must not act on a
// View's possibly late one.
func Load(ctx context.Context, cli *clientv3.Client, layout Layout, logger *slog.Logger) (Snapshot, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	v := &View{cli: cli, layout: layout, log: logger}
	return v.list(ctx)
}

// list reads every key of the cluster at one revision.
func (v *View) list(ctx context.Context) (Snapshot, error) {
	resp, err := v.cli.Get(ctx, v.layout.Root, clientv3.WithPrefix())
	if err != nil {
		return Snapshot{}, errors.Wrap(err, "cluster: list")
	}
	s := emptySnapshot()
	s.Revision = resp.Header.Revision
	for _, kv := range resp.Kvs {
		v.apply(&s, string(kv.Key), kv.Value, kv.ModRevision, kv.Lease, false)
	}
	return s, nil
}

// apply records one key's value (or its deletion) in s.
func (v *View) apply(s *Snapshot, key string, value []byte, rev, lease int64, deleted bool) {
	l := v.layout
	switch {
	case strings.HasPrefix(key, l.Nodes()):
		applyKey(v, s.Nodes, key, strings.TrimPrefix(key, l.Nodes()), value, rev, lease, deleted)
	case strings.HasPrefix(key, l.Assignments()):
		applyKey(v, s.Assignments, key, strings.TrimPrefix(key, l.Assignments()), value, rev, lease, deleted)
	case strings.HasPrefix(key, l.OpenedPrefix()):
		applyKey(v, s.Opened, key, strings.TrimPrefix(key, l.OpenedPrefix()), value, rev, lease, deleted)
	case strings.HasPrefix(key, l.Moves()):
		applyKey(v, s.Moves, key, strings.TrimPrefix(key, l.Moves()), value, rev, lease, deleted)
	case strings.HasPrefix(key, l.Migrations()):
		applyKey(v, s.Migrations, key, strings.TrimPrefix(key, l.Migrations()), value, rev, lease, deleted)
	case strings.HasPrefix(key, l.Drains()):
		applyKey(v, s.Drains, key, strings.TrimPrefix(key, l.Drains()), value, rev, lease, deleted)
	}
}

func applyKey[T NodeInfo | Assignment | Opened | MoveRequest | MigrateRequest | DrainRequest](v *View, m map[string]Versioned[T], key, name string, value []byte, rev, lease int64, deleted bool) {
	if deleted {
		delete(m, name)
		return
	}
	val, err := Decode[T](key, value)
	if err != nil {
		v.log.Warn("cluster key left out", "key", key, "error", err)
		delete(m, name)
		return
	}
	m[name] = Versioned[T]{Value: val, Revision: rev, Lease: lease}
}

// run owns the watch: it applies every event and starts again from a fresh
// list when the watch ends.
func (v *View) run(ctx context.Context) {
	defer close(v.done)
	retry := backoff.Config{}
	for attempt := 0; ctx.Err() == nil; {
		v.mu.Lock()
		from := v.snap.Revision + 1
		v.mu.Unlock()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := v.cli.Watch(wctx, v.layout.Root, clientv3.WithPrefix(), clientv3.WithRev(from))
		err := v.follow(wch)
		cancel()
		if ctx.Err() != nil {
			return
		}
		v.log.Warn("cluster watch ended; listing again", "error", err)
		if retry.Wait(ctx, attempt) != nil {
			return
		}
		attempt++
		snap, lerr := v.list(ctx)
		if lerr != nil {
			continue
		}
		attempt = 0
		v.publish(func(s *Snapshot) { *s = snap })
	}
}

// follow applies a watch's events until it ends.
func (v *View) follow(wch clientv3.WatchChan) error {
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return err
		}
		if len(resp.Events) == 0 {
			continue
		}
		v.publish(func(s *Snapshot) {
			for _, ev := range resp.Events {
				kv := ev.Kv
				v.apply(s, string(kv.Key), kv.Value, kv.ModRevision, kv.Lease, ev.Type == clientv3.EventTypeDelete)
			}
			s.Revision = resp.Header.Revision
		})
	}
	return errors.New("watch channel closed")
}

// publish changes the snapshot under the lock and wakes the waiters.
func (v *View) publish(change func(*Snapshot)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	next := v.snap.clone()
	change(&next)
	v.snap = next
	close(v.changed)
	v.changed = make(chan struct{})
}

// Snapshot returns the cluster as last seen, and a channel closed at the
// next change.
func (v *View) Snapshot() (Snapshot, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.snap, v.changed
}

// WaitFor waits until cond holds for a snapshot, and returns it.
func (v *View) WaitFor(ctx context.Context, cond func(Snapshot) bool) (Snapshot, error) {
	for {
		s, changed := v.Snapshot()
		if cond(s) {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return s, ctx.Err()
		case <-v.done:
			return s, errors.New("cluster: view closed")
		}
	}
}

// Close stops following the cluster and waits; idempotent.
func (v *View) Close() {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return
	}
	v.closed = true
	v.mu.Unlock()
	v.cancel()
	<-v.done
}
