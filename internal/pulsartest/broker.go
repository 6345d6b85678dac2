package pulsartest

import (
	"bufio"
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
)

// ErrClosed is returned by the hooks of a closed broker.
var ErrClosed = errors.New("pulsartest: broker closed")

// ErrTopicNotFound is returned by hooks naming a topic the broker does not have.
var ErrTopicNotFound = errors.New("pulsartest: topic not found")

// Config configures a Broker. The zero value is a usable broker on a random
// loopback port with topic auto-creation on and deduplication off.
type Config struct {
	// Addr is the address to listen on. Empty means "127.0.0.1:0". Only
	// loopback addresses are accepted.
	Addr string
	// DisableAutoTopicCreation makes PRODUCER and SUBSCRIBE on a topic that
	// does not exist fail with TopicNotFound; CreateTopic creates topics.
	DisableAutoTopicCreation bool
	// Deduplication turns on producer deduplication: a SEND whose sequence
	// id is not above the highest one persisted for its producer name is
	// not stored again; its receipt carries the position of the stored
	// entry (or -1:-1 if that entry is no longer known), and PRODUCER_SUCCESS
	// reports the last persisted sequence id. Off, as in a default Pulsar
	// namespace, a client resending after a lost receipt stores duplicates.
	Deduplication bool
	// MaxMessageSize is announced in CONNECTED; zero means 5 MiB. Frames
	// larger than it plus 10 KiB close the connection.
	MaxMessageSize int32
	// Logger receives the broker's logs; nil discards them.
	Logger *slog.Logger
	// ServeAdmin serves a minimal admin REST API (topic unload, delete and
	// stats; see admin.go) on another loopback port: Broker.AdminURL.
	ServeAdmin bool
	// AdminToken, when set, is the bearer token every admin request must
	// carry.
	AdminToken string
	// Clock times DelayReceipts; nil is the real clock. With a
	// clockwork.FakeClock a delayed receipt (and every frame behind it on
	// its connection) is held until the test advances the clock.
	Clock clockwork.Clock
}

// Validate reports a configuration the broker cannot run with.
func (c Config) Validate() error {
	if c.MaxMessageSize < 0 {
		return errors.Newf("pulsartest: negative MaxMessageSize %d", c.MaxMessageSize)
	}
	if c.Addr != "" {
		host, _, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return errors.Wrapf(err, "pulsartest: bad Addr %q", c.Addr)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return errors.Newf("pulsartest: Addr %q is not a loopback address", c.Addr)
		}
	}
	return nil
}

// Broker is an in-memory Pulsar broker speaking the binary protocol. All of
// its state is owned by one goroutine (run); connection goroutines and the
// hooks hand it work through the work channel and wait for the result.
type Broker struct {
	cfg    Config
	log    *slog.Logger
	schema *schema
	crc    *crc32.Table
	ln     net.Listener
	url    string
	// admin serves the admin API when Config.ServeAdmin is set.
	admin    *http.Server
	adminURL string

	work     chan func()
	stop     chan struct{} // closed by Close
	loopDone chan struct{} // closed when run has returned
	stopOnce sync.Once
	wg       sync.WaitGroup // every goroutine the broker started

	st *state // owned by run
}

// state is everything the loop goroutine owns.
type state struct {
	topics       map[string]*topic
	conns        map[*conn]bool
	nextLedger   int64
	nextName     uint64
	nextRequest  uint64
	receiptDelay time.Duration
}

// New starts a broker listening on cfg.Addr (default 127.0.0.1, random port).
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = defaultMaxMessage
	}
	s, err := newSchema()
	if err != nil {
		return nil, errors.Wrap(err, "pulsartest")
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.Wrap(err, "pulsartest: listen")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	b := &Broker{
		cfg:      cfg,
		log:      logger.With("component", "pulsartest"),
		schema:   s,
		crc:      crc32.MakeTable(crc32.Castagnoli),
		ln:       ln,
		url:      "pulsar://" + ln.Addr().String(),
		work:     make(chan func()),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		st: &state{
			topics:     map[string]*topic{},
			conns:      map[*conn]bool{},
			nextLedger: 100,
		},
	}
	if cfg.ServeAdmin {
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		if err := b.startAdmin(host); err != nil {
			_ = ln.Close()
			return nil, err
		}
	}
	b.wg.Add(2)
	go b.run()
	go b.acceptLoop()
	b.log.Info("broker started", "url", b.url)
	return b, nil
}

// Start starts a broker for a test and closes it when the test ends.
func Start(tb testing.TB, cfg Config) *Broker {
	tb.Helper()
	b, err := New(cfg)
	if err != nil {
		tb.Fatalf("pulsartest: %v", err)
	}
	tb.Cleanup(b.Close)
	return b
}

// URL is the service URL clients connect to: "pulsar://127.0.0.1:port".
func (b *Broker) URL() string { return b.url }

// Close stops the broker: it closes the listener and every connection and
// waits for all of its goroutines. Safe to call more than once.
func (b *Broker) Close() {
	b.stopOnce.Do(func() {
		close(b.stop)
		_ = b.ln.Close()
		if b.admin != nil {
			// Requests in progress end at once: the loop refuses work
			// once stop is closed.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = b.admin.Shutdown(ctx)
			cancel()
			_ = b.admin.Close()
		}
	})
	b.wg.Wait()
}

// run is the loop goroutine: it executes queued work until Close, then
// shuts every connection down.
func (b *Broker) run() {
	defer b.wg.Done()
	defer close(b.loopDone)
	for {
		select {
		case fn := <-b.work:
			fn()
		case <-b.stop:
			for c := range b.st.conns {
				c.shutdown()
			}
			clear(b.st.conns)
			return
		}
	}
}

// enqueue hands fn to the loop; false when the broker is stopping.
func (b *Broker) enqueue(fn func()) bool {
	select {
	case b.work <- fn:
		return true
	case <-b.stop:
		return false
	}
}

// do runs fn on the loop goroutine and returns its error.
func (b *Broker) do(fn func(st *state) error) error {
	res := make(chan error, 1)
	if !b.enqueue(func() { res <- fn(b.st) }) {
		return ErrClosed
	}
	select {
	case err := <-res:
		return err
	case <-b.loopDone:
		select {
		case err := <-res:
			return err
		default:
			return ErrClosed
		}
	}
}

// acceptLoop accepts connections until the listener closes.
func (b *Broker) acceptLoop() {
	defer b.wg.Done()
	var id uint64 // connection ids, owned by this goroutine
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			select {
			case <-b.stop:
			default:
				b.log.Error("accept failed; broker stops accepting", "err", err)
			}
			return
		}
		id++
		c := newConn(id, nc)
		// Registered before readLoop starts, so the loop sees the
		// connection before any of its commands.
		if !b.enqueue(func() { b.st.conns[c] = true }) {
			_ = nc.Close()
			return
		}
		b.wg.Add(2)
		go b.readLoop(c)
		go c.writeLoop(&b.wg, b.cfg.Clock)
	}
}

// readLoop reads frames from c and hands the commands to the loop.
func (b *Broker) readLoop(c *conn) {
	defer b.wg.Done()
	r := bufio.NewReaderSize(c.nc, 64<<10)
	maxFrame := uint32(b.cfg.MaxMessageSize) + framePadding
	for {
		f, err := readFrame(r, maxFrame)
		if err == nil {
			var cmd command
			cmd, err = b.schema.decode(f.cmd)
			if err == nil {
				if !b.enqueue(func() { b.handle(c, cmd, f.payload) }) {
					return
				}
				continue
			}
		}
		c.readerGone.Store(true)
		b.enqueue(func() { b.dropConn(c, err) })
		return
	}
}

// topicName expands a short topic name as the client does:
// "x" → "persistent://public/default/x", "t/n/x" → "persistent://t/n/x".
func topicName(name string) string {
	if strings.Contains(name, "://") {
		return name
	}
	if strings.Count(name, "/") == 2 {
		return "persistent://" + name
	}
	return "persistent://public/default/" + name
}

// lookupTopic returns the named topic for a hook.
func (st *state) lookupTopic(name string) (*topic, error) {
	t := st.topics[topicName(name)]
	if t == nil {
		return nil, errors.Wrapf(ErrTopicNotFound, "%s", topicName(name))
	}
	return t, nil
}

// faultTopic returns the named topic, creating it if it does not exist: a
// fault hook may arm a topic before its first producer.
func (st *state) faultTopic(name string) *topic {
	nm := topicName(name)
	t := st.topics[nm]
	if t == nil {
		t = newTopic(nm, st.newLedger())
		st.topics[nm] = t
	}
	return t
}

// newLedger allocates a ledger id, unique within the broker.
func (st *state) newLedger() int64 {
	st.nextLedger++
	return st.nextLedger
}

// CreateTopic creates a topic (a no-op if it exists). Needed only with
// DisableAutoTopicCreation.
func (b *Broker) CreateTopic(name string) error {
	return b.do(func(st *state) error {
		n := topicName(name)
		if st.topics[n] == nil {
			st.topics[n] = newTopic(n, st.newLedger())
		}
		return nil
	})
}

// TrimTopic deletes the topic's entries below the position below. A reader
// that then subscribes at a position before a deleted entry is refused with
// an error the client returns from CreateReader; readers and durable cursors
// already past it move to the first entry left. GET_LAST_MESSAGE_ID keeps
// reporting the last entry written. It returns how many entries were deleted.
func (b *Broker) TrimTopic(name string, below Position) (int, error) {
	var n int
	err := b.do(func(st *state) error {
		t, err := st.lookupTopic(name)
		if err != nil {
			return err
		}
		n = t.deleteBelow(below)
		return nil
	})
	return n, err
}

// ApplyRetention deletes the entries at or below the slowest durable
// subscription cursor (its mark-delete position), like retention after
// acknowledgement. A topic without durable subscriptions keeps everything.
// It returns how many entries were deleted.
func (b *Broker) ApplyRetention(name string) (int, error) {
	var n int
	err := b.do(func(st *state) error {
		t, err := st.lookupTopic(name)
		if err != nil {
			return err
		}
		if low, ok := t.slowestCursor(); ok {
			n = t.deleteBelow(low.next())
		}
		return nil
	})
	return n, err
}

// UnloadTopic emulates a topic unload: every producer and consumer of the
// topic is closed by the broker (CLOSE_PRODUCER / CLOSE_CONSUMER) and the
// clients reconnect; the topic continues on a new ledger. A WaitForExclusive
// producer queued behind an unloaded exclusive producer is granted access
// at once, with the topic epoch bumped, so the old producer is fenced when
// it comes back.
func (b *Broker) UnloadTopic(name string) error {
	return b.do(func(st *state) error {
		t, err := st.lookupTopic(name)
		if err != nil {
			return err
		}
		b.unload(t)
		return nil
	})
}

// DeleteTopic emulates the admin API's forced topic deletion (DELETE
// /admin/v2/persistent/{tenant}/{namespace}/{topic}?force=true): the
// broker closes every producer and consumer of the topic (CLOSE_PRODUCER,
// CLOSE_CONSUMER), refuses the WaitForExclusive producers still queued
// (ERROR TopicNotFound), and forgets the topic with its entries,
// subscriptions, topic epoch and deduplication state. The clients
// reconnect as after an unload and find no topic: with auto-creation on
// they create a new, empty one, on a new ledger and at epoch 0, so an
// exclusive producer coming back with its old epoch is granted there and
// resends what it had pending; with DisableAutoTopicCreation they are
// refused with TopicNotFound, and pulsar-client-go then gives the producer
// up (its pending sends fail). A topic the broker does not have is
// ErrTopicNotFound.
func (b *Broker) DeleteTopic(name string) error {
	return b.do(func(st *state) error {
		t, err := st.lookupTopic(name)
		if err != nil {
			return err
		}
		b.removeTopic(t)
		return nil
	})
}

// TopicExists reports whether the broker has the topic, without creating
// it.
func (b *Broker) TopicExists(name string) (bool, error) {
	var ok bool
	err := b.do(func(st *state) error {
		ok = st.topics[topicName(name)] != nil
		return nil
	})
	return ok, err
}

// DropAllConnections closes every client connection; clients reconnect.
func (b *Broker) DropAllConnections() error {
	return b.do(func(st *state) error {
		for c := range st.conns {
			b.dropConn(c, errors.New("dropped by test hook"))
		}
		return nil
	})
}

// InjectSendError makes the next n SENDs on the topic fail with SEND_ERROR
// (PersistenceError) without being stored. The client then closes its
// connection and resends; later SENDs of the failed producer registration
// are dropped until it reconnects, so nothing is stored out of order.
func (b *Broker) InjectSendError(name string, n int) error {
	return b.do(func(st *state) error {
		st.faultTopic(name).sendErrors += n
		return nil
	})
}

// StallSends stores the next after SENDs on the topic as usual and then
// stalls it: every later SEND is neither stored nor answered, as by a broker
// whose storage stopped acknowledging writes, until ResumeSends. Nothing
// else changes: the connection stays up and the client does not resend, so
// its SendTimeout fails what it had pending.
func (b *Broker) StallSends(name string, after int) error {
	if after < 0 {
		return errors.Newf("pulsartest: negative StallSends count %d", after)
	}
	return b.do(func(st *state) error {
		st.faultTopic(name).stallAfter = after
		return nil
	})
}

// ResumeSends ends StallSends: later SENDs on the topic are stored again.
// The SENDs dropped meanwhile stay lost.
func (b *Broker) ResumeSends(name string) error {
	return b.do(func(st *state) error {
		st.faultTopic(name).stallAfter = -1
		return nil
	})
}

// DelayReceipts delays every SEND_RECEIPT by d from now on (0 stops it),
// on Config.Clock. Frames behind a delayed receipt on the same connection
// wait with it, so receipts stay in order.
func (b *Broker) DelayReceipts(d time.Duration) error {
	return b.do(func(st *state) error {
		st.receiptDelay = d
		return nil
	})
}

// TopicStats describes a topic for tests.
type TopicStats struct {
	Entries   int                 // retained entries
	First     Position            // first retained entry (valid if Entries > 0)
	Last      Position            // last entry written; Entry -1 if none
	Epoch     uint64              // topic epoch
	Producers int                 // granted producers
	Waiters   int                 // queued WaitForExclusive producers
	Consumers int                 // connected consumers
	Cursors   map[string]Position // durable subscriptions' mark-delete positions
	// FencedProducers counts the PRODUCER requests refused with
	// ProducerFenced: an exclusive producer coming back with a stale topic
	// epoch, or an Exclusive one finding a producer in place.
	FencedProducers int
	// FencedClosed counts the CLOSE_PRODUCER requests for producers
	// refused with ProducerFenced: pulsar-client-go sends one when it
	// gives a fenced producer up, once it has marked it closing (its
	// later sends then fail at once).
	FencedClosed int
}

// Stats returns a snapshot of a topic.
func (b *Broker) Stats(name string) (TopicStats, error) {
	var s TopicStats
	err := b.do(func(st *state) error {
		t, err := st.lookupTopic(name)
		if err != nil {
			return err
		}
		s = TopicStats{
			Entries: len(t.entries), Last: t.last, Epoch: t.epoch,
			Producers: len(t.producers), Waiters: len(t.waiters),
			Cursors: map[string]Position{}, FencedProducers: t.fencedRefusals, FencedClosed: t.fencedCloses,
		}
		if len(t.entries) > 0 {
			s.First = t.entries[0].pos
		}
		for _, sub := range t.subs {
			if sub.consumer != nil {
				s.Consumers++
			}
			if sub.durable {
				s.Cursors[sub.name] = sub.markDelete
			}
		}
		return nil
	})
	return s, err
}

// String describes the broker for logs.
func (b *Broker) String() string { return fmt.Sprintf("pulsartest.Broker(%s)", b.url) }
