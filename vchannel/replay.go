package vchannel

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// maxSharedFilter is the most vchannels the shared scanner is asked to
// filter on. The adaptor looks each message's vchannel up in the filter's
// list one by one; for a longer list that costs about what handing the
// router the messages of other vchannels does, and the router looks every
// vchannel up in a map anyway.
const maxSharedFilter = 32

// Replayer replays several vchannels of one pchannel with one read of the
// pchannel (see the package documentation). It is safe for concurrent use.
type Replayer struct {
	w        adaptor.WAL
	pchannel string
	opts     ReplayOptions
	log      *slog.Logger
	streams  map[string]*stream // by vchannel; fixed after Replay
	// tail is the point the consumers catch up to (CaughtUp); hasTail is
	// false when there is none.
	tail    cursor.Checkpoint
	hasTail bool

	// ctx ends at Close: the router stops.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the router and every stream's goroutine
	once   sync.Once

	detachments atomic.Int64
	// waiting is set while the router waits for room in a full stream;
	// streams then signal roomy whenever they deliver or end.
	waiting atomic.Bool
	roomy   chan struct{} // cap 1
	// attention is signalled by Close and by every stream that ends, so
	// that the router stops, or forgets the stream (and closes the shared
	// scanner when none is left) without waiting for a message of its
	// vchannel. One channel, so that the router waits on two, not three.
	attention chan struct{} // cap 1

	// Owned by the router's goroutine.
	shared   walimpls.Scanner
	attached map[string]*stream
	// tailRead: the shared scanner delivered a watermark at or above the
	// tail, so every attached stream was handed all its messages up to it.
	tailRead bool
}

// Replay starts replaying consumers' vchannels of the pchannel w, each
// after its checkpoint, with one shared scanner of w. Each consumer reads
// its own Scanner, and learns from CaughtUp when it has received every
// message of its vchannel up to the replay's tail: opts.CatchUpTo, or else
// w's Tail taken as Replay starts. A read-only or fenced w has no tail to
// take (the replay then has none, and CaughtUp reports false: a fenced
// owner may still replay its history, to learn which of its appends were
// stored); a closed w fails Replay with Tail's error. ctx bounds the start only. Bad
// consumers or options are ErrInvalidReplay (or walimpls.ErrInvalidChannel
// for a bad name) errors.
func Replay(ctx context.Context, w adaptor.WAL, consumers []Consumer, opts ReplayOptions) (*Replayer, error) {
	if w == nil {
		return nil, errors.Wrap(ErrInvalidReplay, "vchannel: replay of a nil wal")
	}
	pchannel := w.Channel().Name
	if err := opts.Validate(); err != nil {
		return nil, errors.Wrapf(err, "vchannel: replay %s", pchannel)
	}
	if err := validateConsumers(consumers); err != nil {
		return nil, errors.Wrapf(err, "vchannel: replay %s", pchannel)
	}
	start, err := earliest(consumers)
	if err != nil {
		return nil, errors.Wrapf(err, "vchannel: replay %s", pchannel)
	}
	tail, hasTail, err := replayTail(ctx, w, opts.CatchUpTo)
	if err != nil {
		return nil, errors.Wrapf(err, "vchannel: replay %s", pchannel)
	}
	opts = opts.withDefaults()
	var filter adaptor.Filter
	if len(consumers) <= maxSharedFilter {
		for _, c := range consumers {
			filter.VChannels = append(filter.VChannels, c.VChannel)
		}
	}
	if hasTail && slices.ContainsFunc(consumers, func(c Consumer) bool { return c.After.TimeTick < tail.TimeTick }) {
		// Watermarks tell the router it has read up to the tail.
		filter.Kinds = []message.Kind{message.KindData, message.KindTimeTick}
	}
	shared, err := w.Read(ctx, adaptor.ReadOption{
		Name:          opts.Name,
		DeliverPolicy: cursor.After(start),
		Filter:        filter,
	})
	if err != nil {
		return nil, errors.Wrapf(err, "vchannel: replay %s after %s", pchannel, start)
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Replayer{
		w:         w,
		pchannel:  pchannel,
		opts:      opts,
		log:       opts.Logger.With("pchannel", pchannel),
		streams:   make(map[string]*stream, len(consumers)),
		tail:      tail,
		hasTail:   hasTail,
		ctx:       rctx,
		cancel:    cancel,
		roomy:     make(chan struct{}, 1),
		attention: make(chan struct{}, 1),
		shared:    shared,
		attached:  make(map[string]*stream, len(consumers)),
	}
	for _, c := range consumers {
		s := newStream(r, c, opts.BufferBytes)
		r.streams[c.VChannel] = s
		r.attached[c.VChannel] = s
	}
	r.wg.Add(len(r.streams) + 1)
	for _, s := range r.streams {
		go func() {
			defer r.wg.Done()
			s.run()
		}()
	}
	go func() {
		defer r.wg.Done()
		r.run()
	}()
	return r, nil
}

// replayTail returns the point a replay's consumers catch up to: given,
// or else w's tail now; none (false) on a WAL that writes no watermark: a
// read-only one, or one fenced by a higher term.
func replayTail(ctx context.Context, w adaptor.WAL, given cursor.Checkpoint) (cursor.Checkpoint, bool, error) {
	if !given.IsZero() {
		return given, true, nil
	}
	tail, err := w.Tail(ctx)
	switch {
	case err == nil:
		return tail, true, nil
	case errors.IsAny(err, walimpls.ErrReadOnly, walimpls.ErrFenced):
		return cursor.Checkpoint{}, false, nil
	}
	return cursor.Checkpoint{}, false, errors.Wrap(err, "take the tail")
}

// Scanner returns the scanner of a consumer's vchannel, and false for a
// vchannel this replay was not given.
func (r *Replayer) Scanner(vchannel string) (walimpls.Scanner, bool) {
	s, ok := r.streams[vchannel]
	if !ok {
		return nil, false
	}
	return s, true
}

// CaughtUp returns a channel closed once the consumer of vchannel has
// received, from its Scanner, every message of its vchannel after its
// checkpoint with a timetick at or below the replay's tail (Tail): with a
// tail Replay took, every such message acknowledged before Replay was
// called. It is closed at once when the checkpoint is at or past the
// tail, once the replay has read up to the tail when there is no such
// message, and never before the reader took the last one; messages
// appended after the tail are not waited for. It is not closed when the
// consumer's scanner ends first (select on its Done too). CaughtUp
// reports false for a vchannel this replay was not given, and when the
// replay has no tail (a read-only WAL and no ReplayOptions.CatchUpTo).
// See the package documentation.
func (r *Replayer) CaughtUp(vchannel string) (<-chan struct{}, bool) {
	s, ok := r.streams[vchannel]
	if !ok || !r.hasTail {
		return nil, false
	}
	return s.caughtUp, true
}

// Tail returns the point the consumers catch up to (ReplayOptions.CatchUpTo
// or the WAL's tail when Replay started), and false when there is none.
func (r *Replayer) Tail() (cursor.Checkpoint, bool) { return r.tail, r.hasTail }

// Detachments counts the consumers that went on with a scanner of their
// own: each reads the pchannel again from where it was detached.
func (r *Replayer) Detachments() int { return int(r.detachments.Load()) }

// Close stops the replay and every consumer's scanner (their Error is nil)
// and waits for them. It is idempotent.
func (r *Replayer) Close() error {
	r.once.Do(func() {
		r.cancel()
		r.callAttention()
		for _, s := range r.streams {
			s.Stop(nil)
		}
		r.wg.Wait()
	})
	return nil
}

// run is the router's goroutine: it reads the shared scanner and hands each
// message to its consumer's stream until no stream is attached, the
// replay is closed, or the shared scanner fails.
func (r *Replayer) run() {
	err := r.route()
	_ = r.shared.Close()
	if err != nil {
		for _, s := range r.attached {
			s.end(err)
		}
	}
	clear(r.attached)
}

// route reads and hands out messages; it returns the shared scanner's error,
// or nil when it stopped for another reason.
func (r *Replayer) route() error {
	in := r.shared.Chan()
	for len(r.attached) > 0 {
		var m message.Immutable
		var ok bool
		// A message that is ready is taken without a two-way select
		// (which locks both channels); attention is checked first, the
		// same way, so that a shared scanner that always has a message
		// ready cannot keep a Close waiting.
		select {
		case <-r.attention:
			if r.ctx.Err() != nil {
				return nil
			}
			r.forgetGone()
			continue
		default:
		}
		select {
		case m, ok = <-in:
		default:
			select {
			case m, ok = <-in:
			case <-r.attention:
				if r.ctx.Err() != nil {
					return nil
				}
				r.forgetGone()
				continue
			}
		}
		if !ok {
			<-r.shared.Done() // Error is set once Done is closed
			if err := r.shared.Error(); err != nil {
				return err
			}
			return errors.Wrap(walimpls.ErrClosed, "shared scanner ended")
		}
		if r.hasTail && m.Kind() == message.KindTimeTick {
			// Asked for only to learn that the tail was read.
			if !r.tailRead && adaptor.CaughtUp(m, r.tail) {
				r.tailRead = true
				for _, s := range r.attached {
					s.reachTail()
				}
			}
			continue
		}
		s, ok := r.attached[m.VChannel()]
		if !ok {
			continue // a detached or closed consumer's
		}
		if s.skipTT > 0 {
			if tt, _ := m.TimeTick(); tt <= s.skipTT {
				continue // at or before the consumer's checkpoint
			}
			s.skipTT = 0
		}
		belowTail := false
		if s.catchingUp() {
			// Data come in timetick order: one above the tail comes after
			// everything of the vchannel up to it.
			if tt, _ := m.TimeTick(); tt > s.tailTT {
				s.reachTail()
			} else {
				belowTail = true
			}
		}
		if !r.offer(s, m, belowTail) {
			return nil
		}
	}
	return nil
}

// offer hands m to s (belowTail: m is at or below the tail s catches up
// to). While s is full, it waits for room as long as no other attached
// stream runs dry, and detaches s when one does. It returns false when the
// replay is closed meanwhile.
func (r *Replayer) offer(s *stream, m message.Immutable, belowTail bool) bool {
	var size int64 // what m counts for, once push needed it
	switch s.push(m, &size, belowTail) {
	case pushed:
		return true
	case notAttached:
		delete(r.attached, s.vc)
		return true
	}
	// Announce the wait before looking, so that a stream that delivers
	// after the look wakes the router.
	r.waiting.Store(true)
	defer r.waiting.Store(false)
	for {
		if r.starving(s) {
			r.detach(s)
			return true
		}
		if !s.hasRoom(size) && !s.isGone.Load() {
			select {
			case <-r.roomy:
			case <-r.ctx.Done():
				return false
			}
		}
		switch s.push(m, &size, belowTail) {
		case pushed:
			return true
		case notAttached:
			delete(r.attached, s.vc)
			return true
		}
	}
}

// starving reports whether an attached stream other than full has
// delivered everything it was handed: its reader waits for the router.
// Streams found gone are forgotten.
func (r *Replayer) starving(full *stream) bool {
	for vc, s := range r.attached {
		if s == full {
			continue
		}
		if s.isGone.Load() {
			delete(r.attached, vc)
			continue
		}
		if s.held.Load() == 0 {
			return true
		}
	}
	return false
}

// forgetGone forgets the streams that ended.
func (r *Replayer) forgetGone() {
	for vc, s := range r.attached {
		if s.isGone.Load() {
			delete(r.attached, vc)
		}
	}
}

// detach lets s go on with a scanner of its own.
func (r *Replayer) detach(s *stream) {
	s.detach()
	delete(r.attached, s.vc)
	r.detachments.Inc()
	r.log.Info("vchannel detached from the shared replay: its reader fell a budget behind while another waited",
		"vchannel", s.vc, "held_bytes", s.held.Load(), "budget_bytes", s.budget)
	if r.opts.onDetach != nil {
		r.opts.onDetach(s.vc)
	}
}

// streamEnded tells the router a stream ended. Called by streams.
func (r *Replayer) streamEnded() {
	r.callAttention()
	r.roomChanged()
}

func (r *Replayer) callAttention() {
	select {
	case r.attention <- struct{}{}:
	default:
	}
}

// roomChanged wakes the router if it waits for room. Called by streams.
func (r *Replayer) roomChanged() {
	if r.waiting.Load() {
		select {
		case r.roomy <- struct{}{}:
		default:
		}
	}
}
