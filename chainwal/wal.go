package chainwal

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// wal is a channel's chain open at a term: appends go to the last
// segment's writer (seg), reads cross the chain.
type wal struct {
	o     *Opener
	ch    adaptor.Channel
	seg   adaptor.WAL
	index uint64 // the last segment's index

	mu       sync.Mutex
	c        chain.Chain // as this WAL knows it: changed by pruning
	reader   *chainread.Reader
	scanners map[closer]struct{}
	closed   bool
}

type closer interface{ Close() error }

var (
	_ adaptor.WAL           = (*wal)(nil)
	_ adaptor.AsyncAnswerer = (*wal)(nil)
	_ adaptor.OpenTimer     = (*wal)(nil)
)

func newWAL(o *Opener, ch adaptor.Channel, c chain.Chain, seg adaptor.WAL) (*wal, error) {
	w := &wal{o: o, ch: ch, seg: seg, index: c.Last().Index, scanners: map[closer]struct{}{}}
	if err := w.setChain(c); err != nil {
		return nil, err
	}
	return w, nil
}

// setChain makes c the chain reads start from. Called with mu held, or
// before w is shared.
func (w *wal) setChain(c chain.Chain) error {
	opts := w.o.cfg.WAL
	opts.TimeTickFloor = 0
	opts.ReadOnly = true
	// A reader's WAL of a sealed segment is short-lived and would share
	// the writer's metric series (a segment 0 has the channel's name):
	// readers record none.
	opts.Metrics = nil
	// Scanners follow the chain in the store: one of a WAL whose channel
	// moved on (a zombie, or a WAL the manager has not closed yet) crosses
	// the seal like any reader.
	store, channel := w.o.cfg.Store, c.Channel
	cfg := chainread.Config{Chain: c, Openers: w.o.cfg.Openers, Options: opts, Writer: w.seg,
		Follow:         func(ctx context.Context) (chain.Chain, error) { return store.Get(ctx, channel) },
		FollowInterval: w.o.cfg.FollowInterval}
	r, err := chainread.New(cfg)
	if err != nil {
		return errors.Wrapf(err, "chainwal: %s", c.Channel)
	}
	w.c, w.reader = c, r
	return nil
}

func (w *wal) Channel() adaptor.Channel   { return w.ch }
func (w *wal) Available() <-chan struct{} { return w.seg.Available() }
func (w *wal) Err() error                 { return w.seg.Err() }

func (w *wal) wrap(r adaptor.AppendResult) adaptor.AppendResult {
	if !r.ID.IsZero() {
		r.ID = cursor.ChainID(w.index, r.ID)
	}
	return r
}

// Append implements adaptor.WAL.
func (w *wal) Append(ctx context.Context, m message.Message) (adaptor.AppendResult, error) {
	r, err := w.seg.Append(ctx, m)
	return w.wrap(r), err
}

// AppendAsync implements adaptor.WAL.
func (w *wal) AppendAsync(ctx context.Context, m message.Message, cb func(adaptor.AppendResult, error)) {
	w.seg.AppendAsync(ctx, m, func(r adaptor.AppendResult, err error) {
		if cb != nil {
			cb(w.wrap(r), err)
		}
	})
}

// AnswerAsync implements adaptor.AsyncAnswerer: on the segment writer's
// callback goroutine.
func (w *wal) AnswerAsync(cb func(adaptor.AppendResult, error), r adaptor.AppendResult, err error) {
	adaptor.AnswerAsync(w.seg, cb, r, err)
}

// OpenTimes implements adaptor.OpenTimer: the open of the last segment's
// writer, the one that fences the channel's lower terms.
func (w *wal) OpenTimes() (adaptor.OpenTimes, bool) { return adaptor.OpenTimesOf(w.seg) }

// AppendBatch implements adaptor.WAL.
func (w *wal) AppendBatch(ctx context.Context, msgs []message.Message) ([]adaptor.AppendResult, error) {
	rs, err := w.seg.AppendBatch(ctx, msgs)
	for i := range rs {
		rs[i] = w.wrap(rs[i])
	}
	return rs, err
}

// Sync implements adaptor.WAL.
func (w *wal) Sync(ctx context.Context) error { return w.seg.Sync(ctx) }

// Tail implements adaptor.WAL.
func (w *wal) Tail(ctx context.Context) (cursor.Checkpoint, error) {
	cp, err := w.seg.Tail(ctx)
	if err == nil && !cp.Position.IsZero() {
		cp.Position = cursor.ChainID(w.index, cp.Position)
	}
	return cp, err
}

// Read implements adaptor.WAL.
func (w *wal) Read(ctx context.Context, opt adaptor.ReadOption) (walimpls.Scanner, error) {
	ro, r, err := w.readOption(opt)
	if err != nil {
		return nil, err
	}
	s, err := r.Read(ctx, ro)
	if err != nil {
		return nil, err
	}
	if _, err := track(w, s); err != nil {
		return nil, err
	}
	return trackedScanner{Scanner: s, w: w}, nil
}

// ReadBatches implements adaptor.WAL.
func (w *wal) ReadBatches(ctx context.Context, opt adaptor.ReadOption) (walimpls.BatchScanner, error) {
	ro, r, err := w.readOption(opt)
	if err != nil {
		return nil, err
	}
	s, err := r.ReadBatches(ctx, ro)
	if err != nil {
		return nil, err
	}
	if _, err := track(w, s); err != nil {
		return nil, err
	}
	return trackedBatches{BatchScanner: s, w: w}, nil
}

// trackedScanner and trackedBatches leave the WAL's set of scanners when
// their consumer closes them, so that a long-lived WAL read many times
// does not keep every scanner it ever started.
type trackedScanner struct {
	walimpls.Scanner
	w *wal
}

func (t trackedScanner) Close() error {
	t.w.untrack(t.Scanner)
	return t.Scanner.Close()
}

type trackedBatches struct {
	walimpls.BatchScanner
	w *wal
}

func (t trackedBatches) Close() error {
	t.w.untrack(t.BatchScanner)
	return t.BatchScanner.Close()
}

func (w *wal) untrack(s closer) {
	w.mu.Lock()
	delete(w.scanners, s)
	w.mu.Unlock()
}

// readOption is opt for the chain reader, with the reader of the chain as
// w knows it. The policy goes as it is: its positions are this WAL's IDs,
// chain IDs or bare IDs of segment 0, which the reader routes to their
// segments.
func (w *wal) readOption(opt adaptor.ReadOption) (chainread.ReadOption, *chainread.Reader, error) {
	w.mu.Lock()
	r, closed := w.reader, w.closed
	w.mu.Unlock()
	if closed {
		return chainread.ReadOption{}, nil, errors.Wrapf(walimpls.ErrClosed, "chainwal: read %s", w.ch.Name)
	}
	if !opt.Until.IsZero() {
		return chainread.ReadOption{}, nil, errors.Wrapf(adaptor.ErrInvalidOptions, "chainwal: read %s: Until is for one segment's log, not a chain", w.ch.Name)
	}
	return chainread.ReadOption{Name: opt.Name, DeliverPolicy: opt.DeliverPolicy, Filter: opt.Filter}, r, nil
}

// positionOf is the chain position of id: a chain ID's own, or segment 0
// for a bare backend ID (what a reader held before the channel had a
// chain).
func positionOf(id message.ID) (cursor.Position, error) {
	if id.IsZero() {
		return cursor.Position{}, errors.Wrap(walimpls.ErrInvalidPosition, "an empty position")
	}
	return cursor.PositionOf(id), nil
}

// track registers s so that Close stops it; a scanner started as w closes
// is stopped at once.
func track[S closer](w *wal, s S) (S, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		_ = s.Close()
		var zero S
		return zero, errors.Wrapf(walimpls.ErrClosed, "chainwal: read %s", w.ch.Name)
	}
	w.scanners[s] = struct{}{}
	return s, nil
}
