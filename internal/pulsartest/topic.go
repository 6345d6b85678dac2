package pulsartest

import (
	"cmp"
	"sort"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Position is where an entry sits in a topic: a ledger id, then an entry id
// within the ledger. Positions order by ledger, then entry. Entry -1 stands
// for "before the first entry of the ledger".
type Position struct {
	Ledger int64
	Entry  int64
}

// Compare orders positions: -1 if p < q, 0 if equal, +1 if p > q.
func (p Position) Compare(q Position) int {
	if c := cmp.Compare(p.Ledger, q.Ledger); c != 0 {
		return c
	}
	return cmp.Compare(p.Entry, q.Entry)
}

// next is the smallest position after p (a lower bound; it may not exist).
func (p Position) next() Position { return Position{p.Ledger, p.Entry + 1} }

// before is the position just below p within its ledger.
func (p Position) before() Position { return Position{p.Ledger, p.Entry - 1} }

// minPosition sorts before every real position.
func minPosition() Position { return Position{-1, -1} }

// entry is one stored SEND: the bytes after the command, kept exactly.
type entry struct {
	pos  Position
	data []byte
	info entryInfo
	// producer name and sequence ids, for deduplication look-ups.
	producer   string
	seq        uint64
	highestSeq uint64
}

// topic is the state of one topic. It is owned by the broker's loop
// goroutine; nothing here is safe for concurrent use.
type topic struct {
	name    string
	ledger  int64    // current ledger: appends go here
	next    int64    // next entry id in the current ledger
	entries []*entry // retained entries, ascending positions
	last    Position // last written position; entry -1 when none ever
	// lastBatchIndex is the batch index of the last message of the last
	// written entry: num_messages-1 for a batch, -1 otherwise.
	lastBatchIndex int32
	trimmed        Position // highest deleted position; minPosition if none

	epoch     uint64             // topic epoch for exclusive producers
	producers map[*producer]bool // granted producers
	exclusive bool               // the granted producer holds exclusive access
	waiters   []*producer        // WaitForExclusive producers, in order
	subs      map[string]*subscription
	// sendErrors is the number of upcoming SENDs to fail (InjectSendError).
	sendErrors int
	// stallAfter is the number of SENDs still stored before the topic
	// stalls (StallSends); -1 when it does not stall.
	stallAfter int
	// fencedRefusals counts PRODUCER requests refused with ProducerFenced,
	// fencedCloses the CLOSE_PRODUCER requests for those producers.
	fencedRefusals int
	fencedCloses   int
	// dedup maps a producer name to the highest sequence id persisted.
	dedup map[string]uint64
}

func newTopic(name string, ledger int64) *topic {
	return &topic{
		name:           name,
		ledger:         ledger,
		last:           Position{ledger, -1},
		lastBatchIndex: -1,
		trimmed:        minPosition(),
		stallAfter:     -1,
		producers:      map[*producer]bool{},
		subs:           map[string]*subscription{},
		dedup:          map[string]uint64{},
	}
}

// nextPos is the position the next append will get.
func (t *topic) nextPos() Position { return Position{t.ledger, t.next} }

// append stores an entry at the next position and returns it.
func (t *topic) append(data []byte, info entryInfo, producer string, seq, highestSeq uint64) *entry {
	e := &entry{pos: t.nextPos(), data: data, info: info, producer: producer, seq: seq, highestSeq: highestSeq}
	t.next++
	t.entries = append(t.entries, e)
	t.last = e.pos
	t.lastBatchIndex = -1
	if info.batched {
		t.lastBatchIndex = info.numMessages - 1
	}
	return e
}

// rollLedger starts a new ledger if the current one has entries, as a real
// broker does when a topic is loaded again.
func (t *topic) rollLedger(ledger int64) {
	if t.next == 0 {
		return
	}
	t.ledger, t.next = ledger, 0
}

// search returns the index of the first retained entry at or after p.
func (t *topic) search(p Position) int {
	return sort.Search(len(t.entries), func(i int) bool { return t.entries[i].pos.Compare(p) >= 0 })
}

// deleteBelow deletes retained entries below p and returns how many went.
// Durable cursors below the deleted range move up to it.
func (t *topic) deleteBelow(p Position) int {
	n := t.search(p)
	if n == 0 {
		return 0
	}
	if last := t.entries[n-1].pos; last.Compare(t.trimmed) > 0 {
		t.trimmed = last
	}
	clear(t.entries[:n])
	t.entries = t.entries[n:]
	for _, s := range t.subs {
		if s.durable && s.markDelete.Compare(t.trimmed) < 0 {
			s.markDelete = t.trimmed
		}
		for q := range s.acked {
			if q.Compare(t.trimmed) <= 0 {
				delete(s.acked, q)
			}
		}
	}
	return n
}

// hasConsumers reports whether a consumer is attached to t.
func (t *topic) hasConsumers() bool {
	for _, s := range t.subs {
		if s.consumer != nil {
			return true
		}
	}
	return false
}

// slowestCursor returns the lowest mark-delete position of the durable
// subscriptions, ok false when there are none.
func (t *topic) slowestCursor() (Position, bool) {
	var low Position
	ok := false
	for _, s := range t.subs {
		if !s.durable {
			continue
		}
		if !ok || s.markDelete.Compare(low) < 0 {
			low, ok = s.markDelete, true
		}
	}
	return low, ok
}

// gone reports whether a reader starting at start (inclusive at the broker)
// has lost entries it needs: some deleted entry lies after start. A start
// exactly at the last deleted entry is allowed, since an exclusive reader
// (the client's default) needs only what follows it.
func (t *topic) gone(start Position) bool {
	return start.Compare(t.trimmed) < 0
}

// subscription is a named cursor on a topic. A durable subscription keeps
// its mark-delete position (everything at or below it is acknowledged) and
// the acknowledged entries above it; a non-durable one (a Reader) lives as
// long as its consumer.
type subscription struct {
	name       string
	durable    bool
	markDelete Position
	acked      map[Position]bool
	consumer   *consumer // the exclusive consumer, or nil
}

// ack records an individual acknowledgement and moves the mark-delete
// position over every acknowledged entry that now follows it.
func (s *subscription) ack(t *topic, p Position) {
	if p.Compare(s.markDelete) <= 0 {
		return
	}
	s.acked[p] = true
	s.advance(t)
}

// ackCumulative acknowledges everything up to and including p.
func (s *subscription) ackCumulative(t *topic, p Position) {
	if p.Compare(s.markDelete) > 0 {
		s.markDelete = p
		for q := range s.acked {
			if q.Compare(p) <= 0 {
				delete(s.acked, q)
			}
		}
	}
	s.advance(t)
}

// advance moves markDelete over acknowledged entries directly after it.
func (s *subscription) advance(t *topic) {
	for {
		i := t.search(s.markDelete.next())
		if i == len(t.entries) {
			return
		}
		p := t.entries[i].pos
		if !s.acked[p] {
			return
		}
		delete(s.acked, p)
		s.markDelete = p
	}
}

// reset moves a durable cursor so that reading resumes at start.
func (s *subscription) reset(t *topic, start Position) {
	s.markDelete = start.before()
	if s.markDelete.Compare(t.trimmed) < 0 {
		s.markDelete = t.trimmed
	}
	clear(s.acked)
}

// consumer is a subscribed consumer on one connection.
type consumer struct {
	c       *conn
	id      uint64
	t       *topic
	sub     *subscription
	permits int64
	readPos Position // next entry to dispatch is the first at or after it
}

// producer is a producer registration on one connection.
type producer struct {
	c    *conn
	id   uint64
	name string
	t    *topic
	mode protoreflect.EnumNumber
	// requestID of a WaitForExclusive PRODUCER still waiting.
	requestID uint64
	waiting   bool
	// broken is set after a SEND_ERROR other than ChecksumError (an
	// injected persistence error, a malformed payload): later SENDs on this
	// registration are dropped; the client reconnects and resends them.
	broken bool
}
