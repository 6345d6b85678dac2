package walmanager

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/walimpls"
)

// Channel names a channel and the term a request is for.
type Channel = adaptor.Channel

// WALManager is what a node does with the WAL lifetimes of its channels:
// the public methods of *Manager, which implements it. Program against it
// so that unit tests of your code can hand it the generated mock,
// mock_walmanager.NewMockWALManager(t) (mocks/walmanager), instead of a
// Manager over a backend. Build the mock with its constructor and t: a call
// the test set no expectation for then fails the test at once, naming the
// call.
type WALManager interface {
	// Open: see Manager.Open.
	Open(ctx context.Context, ch Channel) error
	// Remove: see Manager.Remove.
	Remove(ctx context.Context, ch Channel) error
	// Delete: see Manager.Delete.
	Delete(ctx context.Context, ch Channel) error
	// GetAvailableWAL: see Manager.GetAvailableWAL.
	GetAvailableWAL(ch Channel) (adaptor.WAL, error)
	// Channels: see Manager.Channels.
	Channels() []ChannelStatus
	// Close: see Manager.Close.
	Close(ctx context.Context) error
}

var _ WALManager = (*Manager)(nil)

// Manager owns the WAL lifetimes of a node's channels. It is safe for
// concurrent use. See the package documentation for the rules.
type Manager struct {
	opener  WALOpener
	opts    Options
	log     *slog.Logger
	metrics *metrics

	// lifetime is cancelled by Close: it aborts every open in flight.
	lifetime context.Context
	cancel   context.CancelFunc

	// mu guards everything below and every channel's fields. It is never
	// held across I/O: drivers release it to open and close WALs.
	mu       sync.Mutex
	channels map[string]*channel
	nextID   waiterID
	closed   bool
	// drivers and closers count the goroutines the manager owns: channel
	// drivers, and WAL Close calls (abandoned ones included).
	drivers, closers int
	// driversDone and closersDone are closed once the manager is closed
	// and the matching count is zero.
	driversDone, closersDone chan struct{}
	driversOut, closersOut   bool
	shutdownErrs             []error
	unregistered             bool

	// onTransition, when set (by tests, before any call), sees every move
	// of a channel's current state, under mu.
	onTransition func(name string, from, to state)
}

// channel is the manager's record of one channel. Its fields are guarded by
// Manager.mu.
type channel struct {
	m       *machine
	running bool          // a driver goroutine is running
	kick    chan struct{} // wakes an idle driver; capacity 1
	waiters map[waiterID]chan error
	// wal is the WAL open at m.current (nil when none); handle is what
	// GetAvailableWAL hands out: wal lent (see lend).
	wal    adaptor.WAL
	handle adaptor.WAL
	// avail is wal's Available channel, fetched once when it opened (off
	// the lock, like every call into a WAL).
	avail     <-chan struct{}
	abortOpen context.CancelFunc // cancels the open in flight, if any
}

// New returns a Manager that opens WALs with opener.
func New(opener WALOpener, opts Options) (*Manager, error) {
	if opener == nil {
		return nil, errors.New("walmanager: nil opener")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	lifetime, cancel := context.WithCancel(context.Background())
	return &Manager{
		opener:      opener,
		opts:        opts,
		log:         opts.Logger,
		metrics:     met,
		lifetime:    lifetime,
		cancel:      cancel,
		channels:    make(map[string]*channel),
		driversDone: make(chan struct{}),
		closersDone: make(chan struct{}),
	}, nil
}

// Open makes ch.Name owned at ch.Term on this node and returns once a WAL of
// that term is open. It returns:
//   - nil on success, and for a repeated Open of the term already open (or
//     being opened, whose outcome it then shares): retries are idempotent;
//   - the open's error (with its cause) if it failed; an Open of the same
//     term retries it;
//   - ErrSuperseded if a newer request overtook it before the WAL opened;
//   - ErrStaleTerm if a newer state was already requested: a higher term,
//     or a Remove of this term;
//   - an error matching ErrChannelNotAvailable (and the fence's cause) when
//     the WAL of this term is open but was fenced;
//   - ErrManagerClosed after Close, or ctx's error (the request stays
//     recorded).
func (m *Manager) Open(ctx context.Context, ch Channel) error {
	if err := (walimpls.Channel{Name: ch.Name, Term: ch.Term}).Validate(); err != nil {
		return errors.Wrap(err, "walmanager: open")
	}
	return m.request(ctx, ch.Name, available(ch.Term))
}

// Remove ends ownership of ch.Name at ch.Term and returns once no WAL of
// that term or older is open or opening: nil, ErrStaleTerm if a newer state
// was already requested (the removal is then implied), ErrManagerClosed, or
// ctx's error (the removal stays recorded). Removing an unknown channel
// records the term, so that a delayed older Open is refused.
func (m *Manager) Remove(ctx context.Context, ch Channel) error {
	if err := (walimpls.Channel{Name: ch.Name, Term: ch.Term}).Validate(); err != nil {
		return errors.Wrap(err, "walmanager: remove")
	}
	return m.request(ctx, ch.Name, removed(ch.Term))
}

// Delete ends ownership of ch.Name at ch.Term as Remove does, then deletes
// the channel from the backend (Options.Deleter) and forgets it: the
// manager keeps no record of a deleted channel, so a node that deletes its
// channels over time does not grow. It returns:
//   - nil once the channel is deleted (also when the manager never knew it:
//     it is deleted from the backend all the same);
//   - ErrStaleTerm if a newer state was requested before or while the
//     channel was removed: nothing is deleted;
//   - ErrNoDeleter without Options.Deleter (nothing is removed either);
//   - the backend's error if its delete failed: the channel is removed and
//     forgotten, and Delete may be called again;
//   - ErrManagerClosed after Close, or ctx's error.
//
// The backend finishes every WAL of a deleted channel (see walimpls,
// "Deleting a channel"), and with it the terms: an Open after Delete opens
// a new, empty channel at any term. So the caller must not send an Open of
// the deleted channel afterwards that was meant for it (a delayed request
// of its old owner): the manager no longer has its terms to refuse it.
func (m *Manager) Delete(ctx context.Context, ch Channel) error {
	if err := (walimpls.Channel{Name: ch.Name, Term: ch.Term}).Validate(); err != nil {
		return errors.Wrap(err, "walmanager: delete")
	}
	if m.opts.Deleter == nil {
		return errors.Wrapf(ErrNoDeleter, "walmanager: delete channel %q", ch.Name)
	}
	if err := m.request(ctx, ch.Name, removed(ch.Term)); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.Wrapf(ErrManagerClosed, "channel %q", ch.Name)
	}
	if c := m.channels[ch.Name]; c != nil {
		if want := removed(ch.Term); c.m.expected != want || len(c.waiters) > 0 {
			st := c.m.expected
			m.mu.Unlock()
			return errors.Wrapf(ErrStaleTerm, "walmanager: delete channel %q at term %d: %s was requested meanwhile", ch.Name, ch.Term, st)
		}
		// Its driver, if still running, holds c and finds nothing to do.
		delete(m.channels, ch.Name)
	}
	m.mu.Unlock()
	if err := m.opts.Deleter.Delete(ctx, ch.Name); err != nil {
		m.metrics.transitions.WithLabelValues("delete", "error").Inc()
		return errors.Wrapf(err, "walmanager: delete channel %q", ch.Name)
	}
	m.metrics.transitions.WithLabelValues("delete", "ok").Inc()
	m.log.Info("channel deleted", "channel", ch.Name, "term", ch.Term)
	return nil
}

func (m *Manager) request(ctx context.Context, name string, target state) error {
	if err := ctx.Err(); err != nil {
		// Nothing recorded: a caller already gone asks for nothing.
		return errors.Wrapf(err, "walmanager: channel %q %s", name, target)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.Wrapf(ErrManagerClosed, "channel %q", name)
	}
	c := m.channels[name]
	if c == nil {
		c = &channel{m: newMachine(name), kick: make(chan struct{}, 1)}
		m.channels[name] = c
	}
	m.nextID++
	id := m.nextID
	before := c.m.current
	v := c.m.request(id, target)
	m.afterStep(c, before, v.resolved)
	if v.abort && c.abortOpen != nil {
		c.abortOpen()
	}
	var done chan error
	if !v.done {
		done = make(chan error, 1)
		if c.waiters == nil {
			c.waiters = make(map[waiterID]chan error)
		}
		c.waiters[id] = done
	}
	m.wake(c)
	m.mu.Unlock()
	if v.done {
		return v.err
	}

	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		m.mu.Lock()
		gone := c.m.forget(id)
		if gone {
			delete(c.waiters, id)
		}
		m.mu.Unlock()
		if !gone {
			// Resolved meanwhile: the outcome is in done already.
			return <-done
		}
		return errors.Wrapf(ctx.Err(), "walmanager: channel %q: waiting for %s (still requested)", name, target)
	}
}

// GetAvailableWAL returns the WAL of ch.Name if it is open at exactly
// ch.Term and available. Its Close returns ErrNotOwner. It never creates a
// record for an unknown channel.
func (m *Manager) GetAvailableWAL(ch Channel) (adaptor.WAL, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.Wrapf(ErrManagerClosed, "channel %q", ch.Name)
	}
	c := m.channels[ch.Name]
	if c == nil {
		return nil, errors.Wrapf(ErrChannelNotAvailable, "channel %q: unknown", ch.Name)
	}
	mc := c.m
	if mc.expected.Term != ch.Term {
		return nil, errors.Wrapf(ErrTermMismatch, "channel %q is at term %d, not %d", ch.Name, mc.expected.Term, ch.Term)
	}
	switch st := mc.status(); st.State {
	case StateAvailable:
		return c.handle, nil
	case StateUnavailable:
		return nil, mc.unavailable()
	case StateFailed:
		return nil, notAvailable(mc.failed, "channel %q at term %d: open failed", ch.Name, ch.Term)
	default:
		return nil, errors.Wrapf(ErrChannelNotAvailable, "channel %q at term %d is %s", ch.Name, ch.Term, st.State)
	}
}

// Channels reports every channel the manager has a record of, removed ones
// included, sorted by name.
func (m *Manager) Channels() []ChannelStatus {
	m.mu.Lock()
	out := make([]ChannelStatus, 0, len(m.channels))
	for _, c := range m.channels {
		out = append(out, c.m.status())
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b ChannelStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Close refuses new calls, resolves every waiting caller with
// ErrManagerClosed, aborts the opens in flight and closes every WAL. It
// returns when all of that is done, or when ctx ends (then with ctx's
// error; the remaining work goes on in the background and a later Close
// waits for it again). WAL closes still hung after one more grace period
// are reported as ErrCloseAbandoned. The error joins every WAL close
// failure met during the shutdown. Close is idempotent.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		for _, c := range m.channels {
			res, abort := c.m.stop()
			m.deliver(c, res)
			if abort && c.abortOpen != nil {
				c.abortOpen()
			}
			m.wake(c)
		}
		m.cancel()
		m.signalDrained()
	}
	m.mu.Unlock()

	select {
	case <-m.driversDone:
	case <-ctx.Done():
		return errors.Wrapf(ctx.Err(), "walmanager: close: %d channels still closing", m.count(func() int { return m.drivers }))
	}
	grace := m.opts.Clock.NewTimer(m.opts.CloseGracePeriod)
	defer grace.Stop()
	var errs []error
	select {
	case <-m.closersDone:
	case <-grace.Chan():
		errs = append(errs, errors.Wrapf(ErrCloseAbandoned, "walmanager: close: %d wal closes still running", m.count(func() int { return m.closers })))
	case <-ctx.Done():
		return errors.Wrapf(ctx.Err(), "walmanager: close: %d wal closes still running", m.count(func() int { return m.closers }))
	}
	m.mu.Lock()
	errs = append(errs, m.shutdownErrs...)
	if !m.unregistered {
		m.unregistered = true
		m.metrics.unregister()
	}
	m.mu.Unlock()
	return errors.Join(errs...)
}

func (m *Manager) count(f func() int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return f()
}

// run is a channel's driver: it moves the channel's current state toward
// the expected one, one action at a time, and watches the open WAL for
// fencing. It exits when the channel holds no WAL and has nothing to do.
// It is started by wake with mu held and runs with mu held except around
// I/O and waiting.
func (m *Manager) run(c *channel) {
	name := c.m.name
	m.mu.Lock()
	for {
		before := c.m.current
		a := c.m.next()
		switch a.kind {
		case actNone:
			if c.m.idle() {
				c.running = false
				m.drivers--
				m.signalDrained()
				m.mu.Unlock()
				return
			}
			// A WAL is open and wanted: wait for a request or a fence.
			var fenced <-chan struct{}
			if c.m.fenced == nil {
				fenced = c.avail
			}
			w, term := c.wal, c.m.current.Term
			m.mu.Unlock()
			select {
			case <-c.kick:
				m.mu.Lock()
			case <-fenced:
				reason := unavailableCause(w, name, term)
				m.mu.Lock()
				if c.m.fence(term, reason) {
					m.log.Warn("wal became unavailable", "channel", name, "term", term, "reason", reason)
				}
			}

		case actOpen:
			ctx, cancel := context.WithCancel(m.lifetime)
			c.abortOpen = cancel
			m.mu.Unlock()
			w, avail, err := m.openWAL(ctx, name, a.term)
			cancel()
			m.mu.Lock()
			c.abortOpen = nil
			if err == nil {
				c.wal, c.handle, c.avail = w, lend(w), avail
				m.metrics.open.Inc()
			}
			m.afterStep(c, before, c.m.opened(a.term, err))

		case actClose:
			w := c.wal
			c.wal, c.handle, c.avail = nil, nil, nil
			shutdown := c.m.shutdown
			m.mu.Unlock()
			err := m.closeWAL(name, a.term, w)
			m.metrics.open.Dec()
			m.mu.Lock()
			if err != nil && shutdown {
				m.shutdownErrs = append(m.shutdownErrs, err)
			}
			m.afterStep(c, before, c.m.closed(a.term, err))
		}
	}
}

// openWAL calls the opener, timing and logging it, and fetches the WAL's
// Available channel. Both calls go through callOut: one that never returns
// (a mock's t.FailNow) is an open failure, not a dead driver.
func (m *Manager) openWAL(ctx context.Context, name string, term int64) (adaptor.WAL, <-chan struct{}, error) {
	start := m.opts.Clock.Now()
	var (
		w     adaptor.WAL
		avail <-chan struct{}
		err   error
		call  = "the opener's Open"
	)
	returned := callOut(func() {
		w, err = m.opener.Open(ctx, Channel{Name: name, Term: term})
		if err == nil && w != nil {
			call = "the WAL's Available()"
			avail = w.Available()
		}
	})
	m.metrics.openSeconds.Observe(m.opts.Clock.Since(start).Seconds())
	switch {
	case !returned:
		// An opened WAL whose Available did not return is not used, so it
		// must not stay open either: err and w are both set, closed below.
		err = didNotReturn(call, name, term)
	case err == nil && w == nil:
		err = errors.Newf("walmanager: opener returned no wal and no error")
	}
	switch {
	case err != nil && w != nil:
		// An opener that returns both breaks its contract; the WAL is not
		// used, so it must not stay open.
		_ = m.closeWAL(name, term, w)
		w = nil
	}
	switch {
	case err == nil:
		m.metrics.transitions.WithLabelValues("open", "ok").Inc()
		m.log.Info("wal opened", "channel", name, "term", term, "took", m.opts.Clock.Since(start))
	case ctx.Err() != nil:
		m.metrics.transitions.WithLabelValues("open", "aborted").Inc()
		m.log.Debug("wal open aborted", "channel", name, "term", term, "err", err)
	default:
		m.metrics.transitions.WithLabelValues("open", "error").Inc()
		m.log.Warn("wal open failed", "channel", name, "term", term, "err", err)
	}
	return w, avail, err
}

// closeWAL closes w, giving up after the grace period: a stuck backend must
// not stop the channel (or the node's shutdown) from moving on. An
// abandoned Close keeps running in its goroutine, counted in closers.
func (m *Manager) closeWAL(name string, term int64, w adaptor.WAL) error {
	done := make(chan error, 1)
	var abandoned atomic.Bool
	m.mu.Lock()
	m.closers++
	m.mu.Unlock()
	go func() {
		var err error
		returned := false
		// Deferred, so that a Close that never returns (a mock's t.FailNow
		// ends this goroutine, see callOut) fails at once instead of
		// hanging for the grace period and staying counted in closers.
		defer func() {
			if !returned {
				err = didNotReturn("the WAL's Close()", name, term)
			}
			done <- err
			if abandoned.Load() {
				m.log.Warn("abandoned wal close returned", "channel", name, "term", term, "err", err)
			}
			m.mu.Lock()
			m.closers--
			m.signalDrained()
			m.mu.Unlock()
		}()
		err = w.Close()
		returned = true
	}()
	grace := m.opts.Clock.NewTimer(m.opts.CloseGracePeriod)
	defer grace.Stop()
	select {
	case err := <-done:
		if err != nil {
			m.metrics.transitions.WithLabelValues("close", "error").Inc()
			m.log.Warn("wal close failed", "channel", name, "term", term, "err", err)
			return errors.Wrapf(err, "channel %q: close wal at term %d", name, term)
		}
		m.metrics.transitions.WithLabelValues("close", "ok").Inc()
		m.log.Info("wal closed", "channel", name, "term", term)
		return nil
	case <-grace.Chan():
		abandoned.Store(true)
		m.metrics.transitions.WithLabelValues("close", "abandoned").Inc()
		m.log.Error("wal close hangs: abandoned", "channel", name, "term", term, "grace", m.opts.CloseGracePeriod)
		return errors.Wrapf(ErrCloseAbandoned, "channel %q: wal at term %d did not close within %s", name, term, m.opts.CloseGracePeriod)
	}
}

// afterStep reports a move of c's current state to the test hook and hands
// res to their waiters. mu must be held.
func (m *Manager) afterStep(c *channel, before state, res []resolution) {
	if m.onTransition != nil && c.m.current != before {
		m.onTransition(c.m.name, before, c.m.current)
	}
	m.deliver(c, res)
}

// deliver hands outcomes to their waiters; their channels are buffered, so
// this never blocks. mu must be held.
func (m *Manager) deliver(c *channel, res []resolution) {
	for _, r := range res {
		if done, ok := c.waiters[r.id]; ok {
			delete(c.waiters, r.id)
			done <- r.err
		}
	}
}

// wake gets c's driver going if the channel has work: kicks it if it runs,
// starts it otherwise. mu must be held.
func (m *Manager) wake(c *channel) {
	if c.running {
		select {
		case c.kick <- struct{}{}:
		default: // a kick is pending already
		}
		return
	}
	if c.m.idle() {
		return
	}
	c.running = true
	m.drivers++
	go m.run(c)
}

// signalDrained closes driversDone and closersDone once the manager is
// closed and their counts reach zero. mu must be held.
func (m *Manager) signalDrained() {
	if !m.closed {
		return
	}
	if m.drivers == 0 && !m.driversOut {
		m.driversOut = true
		close(m.driversDone)
	}
	if m.closers == 0 && !m.closersOut {
		m.closersOut = true
		close(m.closersDone)
	}
}
