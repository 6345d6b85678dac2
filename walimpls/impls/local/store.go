package local

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"

	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Store owns one root directory: its lock, its journal and the in-memory
// indexes of its channels. It is a walimpls.Opener; NewOpener makes more
// Openers (nodes, in the conformance suite's words) over the same journal,
// because a second Store on the same root is refused by the lock.
type Store struct {
	cfg      Config
	fs       FS
	log      *slog.Logger
	m        *metrics
	lock     io.Closer
	recovery RecoveryReport

	j    *journal
	prep *preparer
	disk *diskGuard // the disk watermarks; the preparer reads the free space
	def  *Opener    // serves the Store's own Opener methods

	// mu guards channels, openers, closed. A delete takes it under the
	// journal's mu (it removes the channel in framing order); nothing
	// takes the journal's mu under it.
	mu       sync.Mutex
	channels map[string]*channel // live channels, and undefined ones opened
	openers  map[*Opener]struct{}
	closed   bool

	segMu    sync.RWMutex // guards segments and every segment's chans
	segments []*segment   // live segments with published records, oldest first
}

var _ walimpls.Opener = (*Store)(nil)

// segment is one segment file.
type segment struct {
	num uint64
	f   File
	// chans holds, per channel, the seq of its last message in this
	// segment; guarded by Store.segMu.
	chans map[*channel]uint64
}

// entry locates one message of a channel.
type entry struct {
	seq  uint64
	seg  uint64
	off  uint32
	size uint32 // frame size with padding
}

// channel is the in-memory state of one channel of the store.
type channel struct {
	name string

	// keep and lastRemoved mirror the published truncation point, so that
	// scanners check it without the lock before every delivery.
	keep        atomic.Uint64
	lastRemoved atomic.Uint64
	// deleted is set, under mu, when the channel's deletion is published:
	// it is out of the store, and its scanners end (doc.go, Deleting a
	// channel).
	deleted atomic.Bool

	mu      sync.RWMutex // guards the published state below
	id      uint32       // 0 until the channel is defined in the journal
	term    int64        // highest durable term
	gen     uint64       // the latest published claim (see wal.gen)
	lastSeq uint64       // seq of the last published message, 0 if none
	entries []entry      // published messages with seq >= keep, in seq order
	notify  chan struct{}
	writers map[*wal]struct{}

	// w is the journal's view, guarded by the journal's mu (and owned by
	// recovery before the flusher starts): it runs ahead of the published
	// state by the records framed but not yet written and published.
	w struct {
		defined bool
		// deleted is set when the delete is framed: from then on the
		// journal refuses the channel's records.
		deleted     bool
		slot        int // index in the journal's live set, while defined
		id          uint32
		term        int64
		keep        uint64
		lastRemoved uint64
		lastSeq     uint64
		round       uint64 // last round that touched the channel
		// gen counts the ReadWrite opens that claimed the channel: only
		// the writer holding the latest claim may append or truncate.
		gen uint64
	}
}

func newChannel(name string) *channel {
	return &channel{name: name, notify: make(chan struct{}), writers: map[*wal]struct{}{}}
}

// liveSet is the channels defined in the journal and not deleted, in no
// particular order: what a segment start frame lists. Each channel knows
// its slot (channel.w.slot), so a deletion takes it out in constant time.
// Guarded like the channels' journal view.
type liveSet []*channel

func (l *liveSet) add(ch *channel) {
	ch.w.slot = len(*l)
	*l = append(*l, ch)
}

func (l *liveSet) remove(ch *channel) {
	s := *l
	i, last := ch.w.slot, len(s)-1
	if i > last || s[i] != ch {
		panic(fmt.Sprintf("local: channel %q is not in slot %d of the live set", ch.name, i))
	}
	s[i] = s[last]
	s[i].w.slot = i
	s[last] = nil
	*l = s[:last]
}

// snapshots returns the start frame's view of every live channel.
func (l liveSet) snapshots() []chanSnapshot {
	snaps := make([]chanSnapshot, len(l))
	for i, ch := range l {
		snaps[i] = chanSnapshot{
			id: ch.w.id, name: ch.name, term: ch.w.term,
			keep: ch.w.keep, lastRemoved: ch.w.lastRemoved, lastSeq: ch.w.lastSeq,
		}
	}
	return snaps
}

// RecoveryReport says what Open found at the tail of the log.
type RecoveryReport struct {
	// Segments is the number of segment files replayed.
	Segments int
	// Records is the number of frames replayed.
	Records int
	// DroppedBytes and DroppedFrames count the torn tail that was cut off
	// (0 after a clean shutdown or a tail of pre-zeroed space).
	DroppedBytes  int64
	DroppedFrames int
	// Segment and Offset locate the cut, when DroppedBytes > 0.
	Segment uint64
	Offset  int64
	// Reason says what was found at the cut.
	Reason string
}

// New opens (creating if needed) the store at cfg.Dir: it takes the lock,
// recovers the journal and starts the flusher and the segment preparer.
// ctx bounds nothing past its check: recovery runs to its end.
func New(ctx context.Context, cfg Config, opts ...walimpls.Option) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrapf(err, "local: open %s", cfg.Dir)
	}
	o := walimpls.ApplyOptions(opts...)
	fs := cfg.FS
	if fs == nil {
		fs = OSFS()
	}
	cfg.clock = o.Clock
	cfg = cfg.withDefaults()
	s := &Store{
		cfg:      cfg,
		fs:       fs,
		log:      o.Logger.With("backend", Name, "dir", cfg.Dir),
		channels: map[string]*channel{},
		openers:  map[*Opener]struct{}{},
	}
	if err := s.fs.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, errors.Wrapf(err, "local: create %s", cfg.Dir)
	}
	lock, err := s.fs.Lock(s.path(lockName))
	if err != nil {
		return nil, errors.Wrapf(err, "local: lock %s", cfg.Dir)
	}
	s.lock = lock
	m, err := newMetrics(o.Registerer, cfg.Dir, cfg.diskLevels().enabled())
	if err != nil {
		_ = lock.Close()
		return nil, errors.Wrap(err, "local: register metrics")
	}
	s.m = m
	rs, err := s.recover()
	if err != nil {
		for _, seg := range s.segments {
			_ = seg.f.Close()
		}
		m.unregister()
		_ = lock.Close()
		return nil, err
	}
	s.m.segments.Set(float64(len(s.segments)))
	s.disk = newDiskGuard(cfg, s.m, s.log)
	s.prep = newPreparer(s)
	if s.disk.levels.enabled() {
		// Before the first append: one below the hard watermark is refused.
		s.prep.checkDisk()
	}
	s.j = newJournal(s, rs)
	s.def = s.NewOpener()
	go s.prep.run()
	go s.j.run()
	return s, nil
}

// Recovery reports what Open found and cut at the tail of the log.
func (s *Store) Recovery() RecoveryReport { return s.recovery }

// NewOpener returns another Opener over this store's journal: another node
// of the same backend. Closing it closes only the WALs it opened; closing the
// Store closes every Opener.
func (s *Store) NewOpener() *Opener {
	o := &Opener{s: s, wals: map[*wal]struct{}{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		o.closed = true
		return o
	}
	s.openers[o] = struct{}{}
	return o
}

// Open implements walimpls.Opener.
func (s *Store) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	return s.def.Open(ctx, ch)
}

// Capabilities implements walimpls.Opener.
func (s *Store) Capabilities() walimpls.Capabilities {
	return walimpls.Capabilities{
		Fencing:         true,
		Durable:         s.cfg.Sync == SyncAlways,
		MaxMessageBytes: s.cfg.MaxMessageBytes,
		AtomicBatch:     true,
	}
}

// UnmarshalID implements walimpls.Opener.
func (s *Store) UnmarshalID(str string) (message.ID, error) { return message.UnmarshalSeqID(Name, str) }

// Close closes every Opener and WAL of the store, writes and syncs what is
// framed, and releases the directory. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	openers := make([]*Opener, 0, len(s.openers))
	for o := range s.openers {
		openers = append(openers, o)
	}
	s.openers = nil
	s.mu.Unlock()
	for _, o := range openers {
		_ = o.Close()
	}
	err := s.j.close()
	s.prep.close()
	s.segMu.Lock()
	for _, seg := range s.segments {
		if cerr := seg.f.Close(); cerr != nil && err == nil {
			err = errors.Wrapf(cerr, "local: close segment %d", seg.num)
		}
	}
	s.segments = nil
	s.segMu.Unlock()
	s.m.unregister()
	if cerr := s.lock.Close(); cerr != nil && err == nil {
		err = errors.Wrap(cerr, "local: release lock")
	}
	return err
}

// channel returns the state of a channel, creating an undefined one.
func (s *Store) channel(name string) (*channel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.Wrapf(walimpls.ErrClosed, "local: open %q on a closed store", name)
	}
	ch, ok := s.channels[name]
	if !ok {
		ch = newChannel(name)
		s.channels[name] = ch
	}
	return ch, nil
}

// definedChannel returns the channel of a ReadOnly open: one a ReadWrite
// open defined, and not deleted since. It creates nothing: any other name
// is walimpls.ErrNoChannel.
func (s *Store) definedChannel(name string) (*channel, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.Wrapf(walimpls.ErrClosed, "local: open %q on a closed store", name)
	}
	ch, ok := s.channels[name]
	s.mu.Unlock()
	if ok {
		ch.mu.RLock()
		ok = ch.id != 0
		ch.mu.RUnlock()
	}
	if !ok || ch.deleted.Load() {
		return nil, errors.Wrapf(walimpls.ErrNoChannel, "local: open %q read-only: the channel does not exist", name)
	}
	return ch, nil
}

// segmentFile returns the file of a live segment, or nil once it has been
// deleted.
func (s *Store) segmentFile(num uint64) File {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	i := sort.Search(len(s.segments), func(i int) bool { return s.segments[i].num >= num })
	if i < len(s.segments) && s.segments[i].num == num {
		return s.segments[i].f
	}
	return nil
}

// Opener is one node's view of a Store: it opens WALs and closes them when it
// is closed.
type Opener struct {
	s *Store

	mu     sync.Mutex
	closed bool
	wals   map[*wal]struct{}
}

var _ walimpls.Opener = (*Opener)(nil)

// Capabilities implements walimpls.Opener.
func (o *Opener) Capabilities() walimpls.Capabilities { return o.s.Capabilities() }

// UnmarshalID implements walimpls.Opener.
func (o *Opener) UnmarshalID(str string) (message.ID, error) { return o.s.UnmarshalID(str) }

// Open implements walimpls.Opener. A ReadWrite open stores the channel's term
// durably before it returns and fences every earlier writer of the channel
// with a term at or below its own (see doc.go, Fencing and terms).
func (o *Opener) Open(ctx context.Context, info walimpls.Channel) (walimpls.WALImpl, error) {
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrapf(err, "local: open %s", info)
	}
	if err := info.Validate(); err != nil {
		return nil, err
	}
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed {
		return nil, errors.Wrapf(walimpls.ErrClosed, "local: open %s on a closed opener", info)
	}
	for {
		w, err := o.open(ctx, info)
		if errors.Is(err, errChannelDeleted) {
			// A Delete took the channel this open found: the name is a new
			// channel now, which this open looks up again.
			if err := ctx.Err(); err != nil {
				return nil, errors.Wrapf(err, "local: open %s", info)
			}
			continue
		}
		return w, err
	}
}

// errChannelDeleted tells Open that the channel it found was deleted
// before its claim was framed, or before its WAL was listed.
var errChannelDeleted = errors.New("local: channel deleted under an open")

// open is one attempt of Open: errChannelDeleted when the channel it found
// was deleted meanwhile.
func (o *Opener) open(ctx context.Context, info walimpls.Channel) (walimpls.WALImpl, error) {
	var ch *channel
	var err error
	if info.Mode == walimpls.ReadOnly {
		ch, err = o.s.definedChannel(info.Name)
	} else {
		ch, err = o.s.channel(info.Name)
	}
	if err != nil {
		return nil, err
	}
	var gen uint64
	if info.Mode == walimpls.ReadWrite {
		if gen, err = o.s.j.submit(ctx, request{kind: reqTerm, ch: ch, term: info.Term}); err != nil {
			if errors.Is(err, errChannelDeleted) {
				return nil, err
			}
			return nil, errors.Wrapf(err, "local: open %s", info)
		}
	}
	w := newWAL(o, ch, info, gen)
	if w == nil {
		return nil, errChannelDeleted
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		_ = w.Close()
		return nil, errors.Wrapf(walimpls.ErrClosed, "local: open %s on a closed opener", info)
	}
	o.wals[w] = struct{}{}
	o.mu.Unlock()
	return w, nil
}

// Close closes every WAL this opener opened. Idempotent.
func (o *Opener) Close() error {
	o.mu.Lock()
	o.closed = true
	wals := o.wals
	o.wals = map[*wal]struct{}{}
	o.mu.Unlock()
	for w := range wals {
		_ = w.Close()
	}
	o.s.mu.Lock()
	delete(o.s.openers, o)
	o.s.mu.Unlock()
	return nil
}

func (o *Opener) forget(w *wal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.wals, w)
}
