package memory

import (
	"sync"

	"github.com/streamwal/streamwal/message"
)

// channelLog is one channel's messages. entries[i] is stored at sequence
// first+i; sequences below first were truncated.
type channelLog struct {
	mu      sync.Mutex
	entries []message.Message
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
	kept := make([]message.Message, len(l.entries)-drop, cap(l.entries)-drop)
	copy(kept, l.entries[drop:])
	l.entries = kept
	l.first = seq
	l.broadcast()
}

// readFrom copies entries starting at seq: up to maxCount of them and,
// beyond the first, up to maxBytes in all. gone is true when seq was
// truncated; wait is the channel to wait on when nothing is there yet.
func (l *channelLog) readFrom(seq int64, maxCount, maxBytes int) (msgs []message.Message, gone bool, wait <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq < l.first || l.deleted {
		return nil, true, nil
	}
	if seq >= l.next() {
		return nil, false, l.changed
	}
	i := int(seq - l.first)
	n, size := 0, 0
	for n < maxCount && i+n < len(l.entries) {
		size += l.entries[i+n].Size()
		if n > 0 && size > maxBytes {
			break
		}
		n++
	}
	return append([]message.Message(nil), l.entries[i:i+n]...), false, nil
}
