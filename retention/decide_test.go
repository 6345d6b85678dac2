package retention

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/hlc"
	"github.com/streamwal/streamwal/walimpls"
)

// The log of these cases: positions 1..100, timetick = position × 10 at
// one millisecond per position from t0; tail at 100.
var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func id(seq int64) message.ID { return message.NewSeqID("test", seq) }

func tt(seq int64) uint64 { return hlc.Compose(t0.Add(time.Duration(seq)*time.Millisecond), 0) }

func at(seq int64) cursor.Checkpoint {
	return cursor.Checkpoint{Position: id(seq), TimeTick: tt(seq)}
}

// blocks of ten messages of 100 bytes each, positions from..to.
func blocks(from, to int64) []block {
	var out []block
	for s := from; s <= to; s += 10 {
		out = append(out, block{first: id(s), last: id(s + 9), firstTT: tt(s), lastTT: tt(s + 9), messages: 10, bytes: 1000})
	}
	return out
}

func chanC(name string, seq int64) consumer {
	return consumer{scope: consumers.Scope{Consumer: name}, resume: at(seq)}
}

func vchanC(name, v string, seq int64) consumer {
	return consumer{scope: consumers.Scope{Consumer: name, VChannel: v}, resume: at(seq)}
}

func vch(first, last int64) *written {
	return &written{first: id(first), last: id(last), firstTT: tt(first), lastTT: tt(last)}
}

func TestDecide(t *testing.T) {
	base := func() input {
		return input{now: t0.Add(time.Second), tail: at(100), blocks: blocks(1, 91),
			vchannels: map[string]*written{"a": vch(1, 95), "b": vch(5, 40), "": vch(3, 3)}}
	}
	for _, c := range []struct {
		name    string
		in      func(in input) input
		target  cursor.Checkpoint
		heldBy  string
		holding []consumers.Scope
		moves   []string // consumers moved to the tail
		kept    message.ID
	}{{
		name:   "no consumer keeps everything",
		in:     func(in input) input { return in },
		target: cursor.Checkpoint{Position: id(1), TimeTick: tt(1) - 1}, heldBy: heldNoConsumer,
	}, {
		name:   "the slowest channel consumer holds",
		in:     func(in input) input { in.consumers = []consumer{chanC("flusher", 60), chanC("indexer", 30)}; return in },
		target: at(30), heldBy: "consumer indexer", holding: []consumers.Scope{{Consumer: "indexer"}},
	}, {
		name:   "two at one position both hold",
		in:     func(in input) input { in.consumers = []consumer{chanC("f", 30), chanC("g", 30)}; return in },
		target: at(30), heldBy: "consumer f",
		holding: []consumers.Scope{{Consumer: "f"}, {Consumer: "g"}},
	}, {
		name: "a channel consumer covers the vchannels without one",
		in: func(in input) input {
			in.consumers = []consumer{chanC("f", 80), vchanC("i", "a", 70)}
			return in
		},
		target: at(70), heldBy: "consumer i of vchannel a", holding: []consumers.Scope{{Consumer: "i", VChannel: "a"}},
	}, {
		name: "an idle vchannel consumer holds nothing and moves",
		in: func(in input) input {
			in.consumers = []consumer{chanC("f", 80), vchanC("i", "b", 45)}
			return in
		},
		target: at(80), heldBy: "consumer f", holding: []consumers.Scope{{Consumer: "f"}},
		moves: []string{"i"},
	}, {
		name: "a vchannel consumer at the tail keeps its own point",
		in: func(in input) input {
			in.consumers = []consumer{vchanC("i", "b", 100), vchanC("j", "a", 95)}
			in.vchannels = map[string]*written{"a": vch(1, 95), "b": vch(5, 40)}
			return in
		},
		target: at(100), heldBy: "consumer i of vchannel b", holding: []consumers.Scope{{Consumer: "i", VChannel: "b"}},
		moves: []string{"j"},
	}, {
		name: "without a channel consumer, a vchannel without a consumer holds at its first message",
		in: func(in input) input {
			in.consumers = []consumer{vchanC("i", "a", 90)}
			in.vchannels = map[string]*written{"a": vch(1, 95), "b": vch(5, 40)}
			return in
		},
		target: cursor.Checkpoint{Position: id(5), TimeTick: tt(5) - 1}, heldBy: "vchannel b (no consumer)",
	}, {
		name: "messages without a vchannel hold without a channel consumer",
		in: func(in input) input {
			in.consumers = []consumer{vchanC("i", "a", 90), vchanC("j", "b", 90)}
			return in
		},
		target: cursor.Checkpoint{Position: id(3), TimeTick: tt(3) - 1}, heldBy: "messages without a vchannel (no consumer of the channel)",
	}, {
		name:   "everything processed: the tail",
		in:     func(in input) input { in.consumers = []consumer{chanC("f", 100)}; return in },
		target: at(100), heldBy: "consumer f", holding: []consumers.Scope{{Consumer: "f"}},
	}, {
		name: "nothing holds: the tail",
		in: func(in input) input {
			in.consumers = []consumer{vchanC("i", "a", 96), vchanC("j", "b", 41)}
			delete(in.vchannels, "")
			return in
		},
		target: at(100), moves: []string{"i", "j"},
	}, {
		name: "the policy's bytes drop what nobody committed on",
		in: func(in input) input {
			in.policy = Policy{MaxBytes: 3500}
			return in
		},
		target: cursor.Checkpoint{Position: id(71), TimeTick: tt(71) - 1}, heldBy: heldRetention, kept: id(1),
	}, {
		name: "the policy's age drops what nobody committed on",
		in: func(in input) input {
			in.policy = Policy{MaxAge: time.Second - 50*time.Millisecond}
			return in
		},
		target: cursor.Checkpoint{Position: id(41), TimeTick: tt(41) - 1}, heldBy: heldRetention, kept: id(1),
	}, {
		name: "the policy never passes a committed checkpoint",
		in: func(in input) input {
			in.policy = Policy{MaxBytes: 1000}
			in.consumers = []consumer{vchanC("i", "a", 20)}
			return in
		},
		target: at(20), heldBy: "consumer i of vchannel a", holding: []consumers.Scope{{Consumer: "i", VChannel: "a"}},
	}, {
		name: "the policy passes a vchannel nobody consumes, up to a consumer",
		in: func(in input) input {
			in.policy = Policy{MaxBytes: 5000}
			in.consumers = []consumer{vchanC("i", "a", 70)}
			in.vchannels = map[string]*written{"a": vch(1, 95), "b": vch(5, 40)}
			return in
		},
		target: cursor.Checkpoint{Position: id(51), TimeTick: tt(51) - 1}, heldBy: heldRetention, kept: id(5),
	}, {
		name: "the policy dropping everything: the tail",
		in: func(in input) input {
			in.policy = Policy{MaxAge: time.Millisecond}
			return in
		},
		target: at(100), heldBy: heldRetention, kept: id(1),
	}} {
		t.Run(c.name, func(t *testing.T) {
			d, err := decide(c.in(base()))
			require.NoError(t, err)
			require.Equal(t, c.target.Marshal(), d.target.Marshal(), "target")
			require.Equal(t, c.heldBy, d.heldBy)
			require.Equal(t, c.holding, d.holding)
			var moved []string
			for _, m := range d.moves {
				moved = append(moved, m.Consumer)
				require.Equal(t, at(100).Marshal(), m.Resume.Marshal(), "moves go to the tail")
			}
			require.Equal(t, c.moves, moved)
			require.Equal(t, c.kept.Marshal(), d.kept.Marshal(), "kept")
		})
	}
	_, err := decide(input{})
	require.Error(t, err, "nothing read: no decision")
}

// The ledger: blocks close at their bounds, merge past maxBlocks, and a
// truncation forgets what lies before it.
func TestLedger(t *testing.T) {
	l := newLedger(Policy{}, blockBounds{messages: 4096, bytes: 1 << 20})
	for s := int64(1); s <= 10000; s++ {
		m := message.NewImmutable(payloadMessage(t, 100, "v"+string(rune('a'+s%3))).Stamp(message.KindData, 1, tt(s)), id(s))
		l.note(m, at(10000))
	}
	messages, bytes, bySegment := l.totals()
	require.EqualValues(t, 10000, messages)
	require.Equal(t, messages, bySegment[0][0])
	require.Equal(t, bytes, bySegment[0][1])
	require.Len(t, l.blocks, 3, "4,096 messages a block")
	l = newLedger(Policy{}, blockBounds{messages: 1, bytes: 1 << 20})
	for s := int64(1); s <= 5*maxBlocks; s++ {
		l.note(message.NewImmutable(payloadMessage(t, 10, "").Stamp(message.KindData, 1, tt(s)), id(s)), at(5*maxBlocks))
	}
	require.LessOrEqual(t, len(l.blocks), maxBlocks, "bounded")
	require.EqualValues(t, 1, l.blocks[len(l.blocks)-1].messages, "the newest blocks stay fine")
	require.Greater(t, l.blocks[0].messages, int64(1), "the oldest grow coarse")
	messages, _, _ = l.totals()
	require.EqualValues(t, 5*maxBlocks, messages)

	l = newLedger(Policy{}, blockBounds{messages: 4096, bytes: 1 << 20})
	for s := int64(1); s <= 3000; s++ {
		l.note(message.NewImmutable(payloadMessage(t, 1000, "v").Stamp(message.KindData, 1, tt(s)), id(s)), at(3000))
	}
	require.Greater(t, len(l.blocks), 2, "a MiB a block")
	gone, goneBytes := l.truncated(id(2000))
	messages, bytes, _ = l.totals()
	require.EqualValues(t, 3000, gone+messages, "what went and what stays add up")
	require.Positive(t, goneBytes)
	require.Positive(t, bytes)
	require.Equal(t, id(2000), l.vchannels["v"].first, "its first retained message is at or after the point")
	l.truncated(id(3001))
	require.Empty(t, l.vchannels, "a vchannel whose last message went is forgotten")

	// Age precision: a block spans at most MaxAge/64.
	l = newLedger(Policy{MaxAge: 64 * time.Millisecond}, defaultBlocks)
	for s := int64(1); s <= 100; s++ {
		l.note(message.NewImmutable(payloadMessage(t, 10, "").Stamp(message.KindData, 1, tt(s)), id(s)), at(100))
	}
	require.GreaterOrEqual(t, len(l.blocks), 40)
}

func payloadMessage(t *testing.T, size int, vchannel string) message.Message {
	m, err := message.New(make([]byte, size), nil)
	require.NoError(t, err)
	if vchannel != "" {
		m = m.WithVChannel(vchannel)
	}
	return m
}

// failingWAL serves reads of a fixed log that break after a number of
// batches, and records where each read started.
type failingWAL struct {
	adaptor.WAL // nil: only ReadBatches is used
	log         []message.Immutable
	breakAfter  int // batches of one message each before a read breaks; <0: never
	starts      []cursor.Policy
}

func (w *failingWAL) ReadBatches(_ context.Context, opt adaptor.ReadOption) (walimpls.BatchScanner, error) {
	p := opt.DeliverPolicy
	w.starts = append(w.starts, p)
	cp, after := p.After()
	s := &listScanner{batches: make(chan []message.Immutable, len(w.log)), done: make(chan struct{})}
	sent := 0
	for _, m := range w.log {
		tt, _ := m.TimeTick()
		if after && (m.ID().LT(cp.Position) || tt <= cp.TimeTick) {
			continue
		}
		if w.breakAfter >= 0 && sent == w.breakAfter {
			s.err = errors.New("the connection broke")
			break
		}
		s.batches <- []message.Immutable{m}
		sent++
	}
	close(s.done)
	close(s.batches)
	return s, nil
}

type listScanner struct {
	batches chan []message.Immutable
	done    chan struct{}
	err     error
}

func (s *listScanner) Batches() <-chan []message.Immutable { return s.batches }
func (s *listScanner) Done() <-chan struct{}               { return s.done }
func (s *listScanner) Error() error                        { return s.err }
func (s *listScanner) Close() error                        { return nil }

// A read that breaks keeps what it noted: the next goes on after the
// last message it noted, and the ledger counts every message once; the
// rule decides only on a ledger caught up to a tail.
func TestLedgerGoesOnAfterABrokenRead(t *testing.T) {
	var log []message.Immutable
	for s := int64(1); s <= 10; s++ {
		m := message.NewImmutable(payloadMessage(t, 10, "v").Stamp(message.KindData, 1, tt(s)), id(s)).WithLastConfirmed(id(s))
		log = append(log, m)
	}
	wm := message.NewImmutable(message.Message{}.Stamp(message.KindTimeTick, 1, tt(11)), id(11)).WithLastConfirmed(id(11))
	log = append(log, wm)
	w := &failingWAL{log: log, breakAfter: 4}
	l := newLedger(Policy{}, blockBounds{messages: 1, bytes: 1 << 20})
	ctx := context.Background()
	require.Error(t, l.advance(ctx, w, at(11)))
	require.False(t, l.caughtUp())
	w.breakAfter = -1
	require.NoError(t, l.advance(ctx, w, at(11)))
	require.True(t, l.caughtUp())
	messages, _, _ := l.totals()
	require.EqualValues(t, 10, messages, "every message once")
	require.True(t, w.starts[0].IsAll())
	cp, after := w.starts[1].After()
	require.True(t, after)
	require.True(t, cp.Position.EQ(id(4)), "the second read goes on after the fourth message")
}
