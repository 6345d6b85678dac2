package vchannel

import (
	"sync"

	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
)

// streamState is where a stream's messages come from.
type streamState uint8

const (
	// attached: the router hands it messages.
	attached streamState = iota
	// detached: the router let it go; once its queue is delivered it reads
	// a scanner of its own.
	detached
	// ended: the shared scanner failed; once its queue is delivered the
	// stream ends with that error.
	ended
	// gone: the stream's goroutine returned; nothing is queued any more.
	gone
)

// queued is a message handed to a stream, with the bytes it counts for.
type queued struct {
	m    message.Immutable
	size int64
}

// pushResult is what the router learns from handing a stream a message.
type pushResult uint8

const (
	pushed pushResult = iota
	// full: the message would take the stream above its budget; it was
	// not queued.
	full
	// notAttached: the stream is gone (its reader closed it), or no longer
	// takes messages from the router.
	notAttached
)

// stream is one consumer's scanner (walimpls.Scanner). The router hands a
// message straight to a waiting reader when the stream holds nothing, and
// queues it otherwise; the stream's goroutine (run) delivers the queue to
// the reader and, once detached, reads a scanner of its own. The router
// sends on out only under mu while the stream is attached; run closes out
// once it marked the stream gone under mu.
type stream struct {
	*lifecycle.Run
	r      *Replayer
	vc     string
	after  cursor.Checkpoint
	budget int64
	out    chan message.Immutable

	// skipTT is owned by the router: messages with a timetick at or below
	// it are not the consumer's. It is reset to 0 by the first message
	// above it, since timeticks only grow.
	skipTT uint64

	// Catching up to the replay's tail (Replayer.CaughtUp): caughtUp is
	// closed once every message at or below tailTT was handed to the
	// stream (tailSeen) and its reader received them all (received ≥
	// need). Messages are counted only until then. tailTT is 0 when the
	// replay has no tail.
	tailTT   uint64
	handed   uint64        // messages handed by the router; owned by it
	need     atomic.Uint64 // handed when the last message at or below tailTT was
	received atomic.Uint64 // messages the reader received
	tailSeen atomic.Bool
	isCaught atomic.Bool
	caughtUp chan struct{}

	// held is the bytes queued or being delivered and not yet taken by the
	// reader: the router adds, run subtracts.
	held atomic.Int64
	// isGone is set by run as it returns, so that the router can tell a
	// closed stream from a starving one without the lock.
	isGone atomic.Bool
	kick   chan struct{} // cap 1: the router queued something or changed state

	mu    sync.Mutex // guards the fields below
	queue []queued
	state streamState
	// last is the last message queued: where a detached stream resumes.
	last    message.Immutable
	hasLast bool
	err     error // why the shared scanner ended, in state ended
}

var _ walimpls.Scanner = (*stream)(nil)

func newStream(r *Replayer, c Consumer, defaultBudget int) *stream {
	budget := c.BufferBytes
	if budget == 0 {
		budget = defaultBudget
	}
	s := &stream{
		Run:      lifecycle.NewRun(),
		r:        r,
		vc:       c.VChannel,
		after:    c.After,
		budget:   int64(budget),
		out:      make(chan message.Immutable),
		skipTT:   c.After.TimeTick,
		kick:     make(chan struct{}, 1),
		caughtUp: make(chan struct{}),
	}
	if r.hasTail {
		s.tailTT = r.tail.TimeTick
		if c.After.TimeTick >= s.tailTT {
			// Everything up to the tail was processed already.
			s.markCaughtUp()
		}
	}
	return s
}

// catchingUp reports whether the stream still waits for the router to hand
// it everything up to the tail.
func (s *stream) catchingUp() bool { return s.tailTT != 0 && !s.tailSeen.Load() }

// counting reports whether the stream still counts what its reader
// receives.
func (s *stream) counting() bool { return s.tailTT != 0 && !s.isCaught.Load() }

// reachTail records that everything of the vchannel up to the tail was
// handed to the stream. Called by the router.
func (s *stream) reachTail() {
	s.tailSeen.Store(true)
	s.checkCaughtUp()
}

// gotOne counts a message the reader received.
func (s *stream) gotOne() {
	if s.counting() {
		s.received.Inc()
		s.checkCaughtUp()
	}
}

// checkCaughtUp closes caughtUp once everything up to the tail was handed
// and received. The router (handing) and run (delivering) both call it, so
// that whichever is last sees both.
func (s *stream) checkCaughtUp() {
	if s.tailSeen.Load() && s.received.Load() >= s.need.Load() {
		s.markCaughtUp()
	}
}

func (s *stream) markCaughtUp() {
	if s.isCaught.CompareAndSwap(false, true) {
		close(s.caughtUp)
	}
}

func (s *stream) Chan() <-chan message.Immutable { return s.out }

// push hands m to the stream: straight to its reader when the stream holds
// nothing and the reader waits, else to the queue, unless that would take
// the stream above its budget while it holds something. *size is what m
// counts for, computed on first need (0 until then); belowTail says m is
// at or below the tail the stream catches up to. Called by the router.
func (s *stream) push(m message.Immutable, size *int64, belowTail bool) pushResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != attached {
		return notAttached
	}
	if s.held.Load() == 0 {
		// Nothing is queued or in run's hands, so nothing can overtake
		// m: a waiting reader takes it from the router, which saves
		// waking run.
		select {
		case s.out <- m:
			s.last, s.hasLast = m, true
			s.handedOne(belowTail)
			s.gotOne()
			return pushed
		default:
		}
	}
	if *size == 0 {
		*size = int64(m.Size()) + messageOverhead
	}
	if !s.hasRoom(*size) {
		return full
	}
	s.queue = append(s.queue, queued{m: m, size: *size})
	s.last, s.hasLast = m, true
	s.handedOne(belowTail)
	s.held.Add(*size)
	s.wake()
	return pushed
}

// handedOne counts a message handed to the stream (belowTail: at or below
// the tail). Called by the router.
func (s *stream) handedOne(belowTail bool) {
	if s.counting() {
		s.handed++
		if belowTail {
			s.need.Store(s.handed)
		}
	}
}

// hasRoom reports whether push would take a message of size bytes.
func (s *stream) hasRoom(size int64) bool {
	held := s.held.Load()
	return held == 0 || held+size <= s.budget
}

// detach lets the stream go: it reads on from a scanner of its own. Called
// by the router.
func (s *stream) detach() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == attached {
		s.state = detached
		s.wake()
	}
}

// end makes an attached stream end with err once its queue is delivered.
// Called by the router.
func (s *stream) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == attached {
		s.state, s.err = ended, err
		s.wake()
	}
}

func (s *stream) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run is the stream's goroutine: it delivers until the stream ends.
func (s *stream) run() {
	err := s.deliver()
	s.mu.Lock()
	s.state = gone
	clear(s.queue) // do not pin what was never delivered
	s.queue = nil
	s.last = message.Immutable{}
	s.mu.Unlock()
	s.isGone.Store(true)
	s.r.streamEnded()
	close(s.out)
	s.End(err)
}

// deliver hands the queue to the reader, then, once the router let the
// stream go, reads on from a scanner of its own.
func (s *stream) deliver() error {
	var batch []queued
	for {
		s.mu.Lock()
		batch, s.queue = s.queue, batch[:0]
		state, err := s.state, s.err
		last, hasLast := s.last, s.hasLast
		s.mu.Unlock()
		if len(batch) == 0 {
			switch state {
			case attached:
				select {
				case <-s.kick:
					continue
				case <-s.Stopping():
					return nil
				}
			case detached:
				resume := s.after
				if hasLast {
					var err error
					if resume, err = cursor.CheckpointOf(last); err != nil {
						// The adaptor gives every message it delivers a
						// resume position; without one, nothing to resume.
						return errors.Wrapf(err, "vchannel %s: resume after detaching", s.vc)
					}
				}
				return s.follow(resume)
			default:
				return errors.Wrapf(err, "vchannel %s: shared reader of %s", s.vc, s.r.pchannel)
			}
		}
		for i, q := range batch {
			if !s.send(q.m) {
				return nil
			}
			s.gotOne()
			batch[i] = queued{}
			s.held.Sub(q.size)
			s.r.roomChanged()
		}
	}
}

// follow reads the vchannel from a scanner of its own, started after
// resume, until the stream is closed or that scanner ends. Its reader has
// received everything handed to the stream before: while the stream is
// not caught up, the scanner also delivers watermarks, and the first one
// at or above the tail, or a message above it, shows that the reader has
// everything up to the tail.
func (s *stream) follow(resume cursor.Checkpoint) error {
	filter := adaptor.Filter{VChannels: []string{s.vc}}
	watch := s.counting() // until caught up
	if watch {
		filter.Kinds = []message.Kind{message.KindData, message.KindTimeTick}
	}
	watermarks := watch // delivered by sc, never to the reader
	sc, err := s.r.w.Read(s.Context(), adaptor.ReadOption{
		Name:          s.r.opts.Name + "/" + s.vc,
		DeliverPolicy: cursor.After(resume),
		Filter:        filter,
	})
	if err != nil {
		return errors.Wrapf(err, "vchannel %s: read on its own after %s", s.vc, resume)
	}
	defer func() { _ = sc.Close() }()
	for {
		select {
		case m, ok := <-sc.Chan():
			if !ok {
				<-sc.Done() // Error is set once Done is closed
				if err := sc.Error(); err != nil {
					return errors.Wrapf(err, "vchannel %s: own reader", s.vc)
				}
				return errors.Wrapf(walimpls.ErrClosed, "vchannel %s: own reader ended", s.vc)
			}
			if watermarks && m.Kind() == message.KindTimeTick {
				if watch && adaptor.CaughtUp(m, s.r.tail) {
					s.markCaughtUp()
					watch = false
				}
				continue
			}
			if watch {
				if tt, _ := m.TimeTick(); tt > s.tailTT {
					s.markCaughtUp()
					watch = false
				}
			}
			if !s.send(m) {
				return nil
			}
		case <-s.Stopping():
			return nil
		}
	}
}

// send hands m to the reader; false when the stream is stopped first.
func (s *stream) send(m message.Immutable) bool {
	select {
	case s.out <- m:
		return true
	default:
	}
	select {
	case s.out <- m:
		return true
	case <-s.Stopping():
		return false
	}
}
