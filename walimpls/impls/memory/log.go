package memory

import (
	"sync"

	"github.com/streamwal/streamwal/message"
)

// channelLog is one channel's messages. entries[i] is stored at sequence
// first+i; sequences below first were truncated.
type channelLog struct {
	mu      sync.Mutex
	entries []entry
	first   int64
	term    int64
	// claim counts ReadWrite opens at the current term: a writer whose claim
	// is not the latest of its term was fenced by a later open of it.
	claim uint64
	// deleted is set by Cluster.deleteLog: the channel is gone, its writers
	// are fenced and its scanners end.
	deleted bool
	// changed is closed and replaced whenever entries change, to wake
	// scanners without polling.
	changed chan struct{}
}

// entry is a stored message with its size, counted once: a message's size
// walks its properties, and scanners bound their read-ahead by it.
type entry struct {
	m    message.Message
	size int
}

func newChannelLog() *channelLog {
	return &channelLog{changed: make(chan struct{})}
}

// next returns the sequence the next append gets. Assumes l.mu is held.
func (l *channelLog) next() int64 { return l.first + int64(len(l.entries)) }

// broadcast wakes every waiting scanner. Assumes l.mu is held.
func (l *channelLog) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// truncate drops entries before seq. Assumes l.mu is held and
// first < seq ≤ next().
func (l *channelLog) truncate(seq int64) {
	drop := int(seq - l.first)
	// Copy the kept tail so the dropped messages can be collected.
	kept := make([]entry, len(l.entries)-drop, cap(l.entries)-drop)
	copy(kept, l.entries[drop:])
	l.entries = kept
	l.first = seq
	l.broadcast()
}

// readFrom appends to dst the messages stored from seq on, with their IDs:
// up to maxCount of them and, beyond the first, up to maxBytes in all. gone
// is true when seq was truncated; wait is the channel to wait on when
// nothing is there yet.
func (l *channelLog) readFrom(dst []message.Immutable, seq int64, maxCount, maxBytes int) (msgs []message.Immutable, gone bool, wait <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq < l.first || l.deleted {
		return dst, true, nil
	}
	if seq >= l.next() {
		return dst, false, l.changed
	}
	i := int(seq - l.first)
	if k := min(maxCount, len(l.entries)-i); cap(dst)-len(dst) < k {
		// Room for what is there, not for maxCount: a tailing reader
		// mostly finds one or two messages, and a slice of maxCount for
		// each was most of what reading them cost.
		dst = append(make([]message.Immutable, 0, len(dst)+k), dst...)
	}
	size := 0
	for n := 0; n < maxCount && i+n < len(l.entries); n++ {
		e := l.entries[i+n]
		size += e.size
		if n > 0 && size > maxBytes {
			break
		}
		dst = append(dst, message.NewImmutable(e.m, message.NewSeqID(Name, seq+int64(n))))
	}
	return dst, false, nil
}
