package walmanager

import "fmt"

// ChannelState summarizes where a channel's lifetime stands.
type ChannelState uint8

const (
	// StateOpening: a WAL at Term is wanted and not open yet.
	StateOpening ChannelState = iota
	// StateAvailable: the WAL at Term is open and GetAvailableWAL hands it
	// out.
	StateAvailable
	// StateUnavailable: the WAL at Term was opened but stopped being
	// available on its own (fenced by a higher term); LastError says why.
	StateUnavailable
	// StateFailed: the last open at Term failed; LastError is the cause.
	// An Open of the same term retries it.
	StateFailed
	// StateRemoving: the channel is removed at Term and a WAL is still
	// being closed.
	StateRemoving
	// StateRemoved: the channel is removed at Term; nothing is open.
	StateRemoved
	// StateClosed: the manager is closed.
	StateClosed
)

func (s ChannelState) String() string {
	switch s {
	case StateOpening:
		return "opening"
	case StateAvailable:
		return "available"
	case StateUnavailable:
		return "unavailable"
	case StateFailed:
		return "failed"
	case StateRemoving:
		return "removing"
	case StateRemoved:
		return "removed"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ChannelStatus is one channel as Channels reports it.
type ChannelStatus struct {
	Name string
	// Term is the term of the newest accepted request.
	Term  int64
	State ChannelState
	// LastError is the most recent failure of the channel (a failed open, a
	// failed or abandoned close, a fence), kept even after the channel
	// moved on; nil if there was none.
	LastError error
}
