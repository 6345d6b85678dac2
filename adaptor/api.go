package adaptor

import (
	"context"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Channel names the WAL to open and the owner's term.
type Channel struct {
	Name string
	Term int64
}

// AppendResult is where an acknowledged message was stored.
type AppendResult struct {
	// ID is the backend position of the message (of its first part when it
	// was split).
	ID message.ID
	// TimeTick is the message's timetick: strictly increasing per channel.
	TimeTick uint64
}

// WAL is one channel's write-ahead log, as an embedding node uses it. It is
// safe for concurrent use.
type WAL interface {
	// Channel returns the channel and term the WAL was opened with.
	Channel() Channel
	// Append stores m and returns once it is durable (as the backend defines
	// durable). Retryable backend errors are retried until ctx ends.
	// ErrFenced, ErrTooLarge and ErrClosed are returned at once. A failed
	// append was certainly not stored when walimpls.NotStored(err) holds;
	// otherwise its outcome is unknown (see the package documentation).
	Append(ctx context.Context, m message.Message) (AppendResult, error)
	// AppendAsync stores m in the background and calls cb with the outcome,
	// exactly once, from the WAL's callback goroutine (from the caller's
	// own only when the WAL is closed). Callbacks run one at a time, in
	// the order the appends were answered: a callback that blocks holds
	// back the callbacks after it (not the appends), and one must neither
	// wait for another append's callback nor call Close, which waits for
	// every callback. It takes m's timetick before it
	// returns, so one caller's async appends are delivered in call order.
	// It blocks (back-pressure) while the number of appends in flight is
	// at its bound, until ctx ends. On a backend that appends
	// asynchronously (walimpls.AsyncAppender: every backend here) the message
	// goes to the backend without a goroutine per append.
	AppendAsync(ctx context.Context, m message.Message, cb func(AppendResult, error))
	// AppendBatch stores msgs as one backend batch, with timeticks
	// increasing in slice order: they are stored and delivered in slice
	// order. On a backend that declares walimpls.Capabilities.AtomicBatch
	// (memory, local, Kafka with transactions) the batch is stored whole or
	// not at all; on another (Pulsar, Kafka without transactions) a failure
	// may leave a stored prefix, whose results come with the error. A batch
	// counts as one append in flight.
	AppendBatch(ctx context.Context, msgs []message.Message) ([]AppendResult, error)
	// Read starts a scanner. It delivers in strictly increasing timetick
	// order; its Error is valid once Done is closed, which happens before
	// Chan closes, so a reader that drained Chan can call Error.
	Read(ctx context.Context, opt ReadOption) (walimpls.Scanner, error)
	// ReadBatches starts a scanner that delivers the same messages as
	// Read's, several per receive: a reader that takes thousands of
	// messages a second pays one goroutine hand-off per slice instead of
	// one per message.
	ReadBatches(ctx context.Context, opt ReadOption) (walimpls.BatchScanner, error)
	// Sync appends a watermark now: once it returns, every message appended
	// before the call is released to scanners.
	Sync(ctx context.Context) error
	// Tail is Sync that also says where the log stands: every message
	// acknowledged before the call has a timetick at or below the
	// checkpoint's, so a scanner that delivers a watermark at or above it
	// (Filter.Kinds with message.KindTimeTick, see CaughtUp) has delivered
	// all of them, and cursor.After(tail) delivers exactly what is appended
	// after. A read-only WAL writes no watermark: ErrReadOnly.
	Tail(ctx context.Context) (cursor.Checkpoint, error)
	// ParseCheckpoint decodes Checkpoint.Marshal's string with this WAL's
	// backend; a string that does not decode is ErrCorruptCheckpoint.
	ParseCheckpoint(s string) (cursor.Checkpoint, error)
	// ParseID decodes an ID's Marshal form with this WAL's backend; a string
	// that does not decode is message.ErrCorruptID.
	ParseID(s string) (message.ID, error)
	// Truncate removes every message before upTo (an ID a scanner delivered
	// or an append returned); upTo itself is kept. Reads from before it then
	// fail with walimpls.ErrPositionGone.
	Truncate(ctx context.Context, upTo message.ID) error
	// Available is closed when the WAL can no longer append: it was fenced
	// by a higher term, or closed.
	Available() <-chan struct{}
	// Err returns why Available closed (an error matching walimpls.ErrFenced
	// or walimpls.ErrClosed), or nil while the WAL is available.
	Err() error
	// Close stops the WAL and its scanners; idempotent.
	Close() error
}

// ReadOption configures a scanner.
type ReadOption struct {
	// Name identifies the scanner in logs and metrics.
	Name string
	// DeliverPolicy says where to start; the zero value is cursor.All.
	// Every policy but cursor.Tail (a backend's) is taken.
	DeliverPolicy cursor.Policy
	// Filter selects what is delivered; the zero value delivers every data
	// message.
	Filter Filter
	// Until, when set, is where the log ends for this scanner: the last
	// position of a log that nothing acknowledged is appended to any more
	// (a sealed segment of a chain, every writer of which was fenced
	// before its end was read). The scanner reads the log up to Until,
	// inclusive, and never past it. Once it has read Until (or the first
	// position after it, when Until itself is not in the log) no later
	// message can come whose watermark it would wait for: it releases
	// everything it holds, in timetick order, delivers it, and ends with a
	// nil Error (Chan closes). A start after Until (or cursor.Latest)
	// ends at once. Until must be an ID of this WAL's backend.
	Until message.ID
}

// Filter selects messages; every set condition must hold.
type Filter struct {
	// VChannels keeps messages of these virtual channels; empty keeps all.
	VChannels []string
	// Kinds keeps messages of these kinds; empty keeps data messages only.
	Kinds []message.Kind
	// TimeTickAbove keeps messages whose timetick is > TimeTickAbove (when
	// set, i.e. non-zero).
	TimeTickAbove uint64
	// TimeTickAtLeast keeps messages whose timetick is ≥ TimeTickAtLeast.
	TimeTickAtLeast uint64
}
