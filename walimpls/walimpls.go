package walimpls

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/message"
)

// Capabilities declares what a backend can do. The conformance suite skips
// only the parts a backend declares it cannot do, naming why.
type Capabilities struct {
	// Fencing is true when a ReadWrite open at term T stops, at the backend
	// itself, every earlier writer of the channel with a term ≤ T.
	Fencing bool
	// Durable is true when acknowledged appends survive a crash of the
	// process.
	Durable bool
	// MaxMessageBytes is the largest Message.Size (payload and properties)
	// the backend accepts; 0 means no limit below what memory allows.
	MaxMessageBytes int
	// AtomicBatch is true when AppendBatch stores a batch whole or not at
	// all, whatever its size, also across a crash of the writer.
	AtomicBatch bool
}

// Opener opens WALs of one backend. It is safe for concurrent use.
type Opener interface {
	// Open opens a channel's WAL. Where the backend can fence, a ReadWrite
	// open at term T fences every earlier ReadWrite WAL of the channel with a
	// term ≤ T (the later claim wins), and an open below the channel's highest
	// term is ErrFenced and changes nothing. A ReadOnly open creates
	// nothing: one of a channel that does not exist (never opened
	// ReadWrite, or deleted) is ErrNoChannel.
	Open(ctx context.Context, ch Channel) (WALImpl, error)
	// Capabilities declares what this backend can do.
	Capabilities() Capabilities
	// UnmarshalID decodes an ID this backend marshalled; anything else is
	// message.ErrCorruptID.
	UnmarshalID(s string) (message.ID, error)
	// Delete removes the channel name and everything the backend keeps for
	// it (messages, terms, claims), and frees what it held. A channel that
	// does not exist, or was deleted already, is deleted: several processes
	// may delete one channel at once. What becomes of the channel's open
	// WALs, and of a channel later opened under the same name, is in the
	// package documentation ("Deleting a channel").
	Delete(ctx context.Context, name string) error
	// Close releases the opener and closes every WAL it opened: their later
	// calls fail with ErrClosed and their scanners end. Idempotent.
	Close() error
}

// Creator is implemented by an Opener whose backend keeps each channel in a
// resource that must exist before the channel is used (a Kafka topic).
// Create makes it exist: it creates what is missing and succeeds when it
// exists already, so several processes may create one channel at once.
// A channel pool creates its channels ahead of use through it.
type Creator interface {
	Create(ctx context.Context, name string) error
}

// WALImpl is one channel's log on a backend. It is safe for concurrent use.
// A single message is appended with the package's Append, AppendBatch of
// one for every backend.
type WALImpl interface {
	// WALName names the backend ("memory", "local", ...).
	WALName() string
	// Channel echoes the channel the WAL was opened with.
	Channel() Channel
	// AppendBatch stores msgs in slice order (their IDs increase in slice
	// order) and returns their IDs once the backend acknowledged all of
	// them. Every message is checked first: one above MaxMessageBytes fails
	// the whole batch with ErrTooLarge and nothing is stored. On a backend
	// that declares Capabilities.AtomicBatch the batch is stored whole or
	// not at all, also across a crash; on another, a failure may leave a
	// prefix of it stored: the IDs returned with the error are those of a
	// prefix known to be stored, and the rest has the outcome the error says
	// (NotStored or unknown). An empty batch stores nothing.
	AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error)
	// Read starts a scanner. The scanner outlives ctx.
	Read(ctx context.Context, opt ReadOption) (Scanner, error)
	// Truncate removes every message before upTo; upTo itself is kept. upTo
	// beyond the last message is ErrInvalidPosition; a fenced WAL fails with
	// ErrFenced and removes nothing.
	Truncate(ctx context.Context, upTo message.ID) error
	// Last returns the ID of the last message stored in the channel (every
	// append acknowledged before the call is at or below it), or the zero ID
	// when the channel never held a message. It works on read-only and on
	// fenced WALs.
	Last(ctx context.Context) (message.ID, error)
	// Close releases the WAL; it is idempotent. Scanners it started end.
	Close() error
}

// AsyncAppender is implemented by a WALImpl that can take a batch to store
// and answer later: a caller with many appends in flight hands each over
// and goes on, without a goroutine of its own per append. The adaptor's
// AppendAsync uses it when a backend offers it.
type AsyncAppender interface {
	// AppendBatchAsync stores msgs as AppendBatch does (same checks,
	// refusals, atomicity and errors) and calls done exactly once with
	// what AppendBatch would have returned: from a goroutine of the
	// backend, or before AppendBatchAsync returns when the batch is
	// refused at once (a closed or fenced WAL, a message above the limit,
	// ctx already done). done must not block: the backend may hold the
	// answers of later batches until it returns.
	//
	// Batches handed over by calls that do not overlap (one returned
	// before the next began) are stored in call order: every ID of a
	// stored batch is above every ID of the batches stored before it. A
	// batch after a failed one may still be stored. The caller may reuse
	// the messages' payloads and property maps once done was called, not
	// before: so done comes once the backend no longer holds them. ctx
	// ends an append the backend can still refuse (queued, not sent); one
	// on its way is answered when its outcome is known. Close ends the
	// appends in flight, each with its own answer.
	AppendBatchAsync(ctx context.Context, msgs []message.Message, done func([]message.ID, error))
}

// BatchReader is implemented by a WALImpl whose scanners can hand over
// several messages per channel receive. A consumer that reads through it
// pays one goroutine hand-off per slice instead of one per message: the
// adaptor catches up through it when a backend offers it.
type BatchReader interface {
	// ReadBatches starts a scanner like Read, with the same options and the
	// same promises (ID order without gaps, where it starts, how it ends);
	// only the unit of delivery differs.
	ReadBatches(ctx context.Context, opt ReadOption) (BatchScanner, error)
}

// ConfigDecoder decodes a backend's configuration section into the backend's
// own settings struct; a nil ConfigDecoder means "all defaults".
type ConfigDecoder func(into any) error

// BuildParams are what a Builder needs besides its configuration.
type BuildParams struct {
	// Config decodes the backend's section; nil leaves defaults.
	Config ConfigDecoder
	// Logger receives the backend's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the backend's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Options returns the Options that pass p's Logger and Registerer on to a
// backend's constructor.
func (p BuildParams) Options() []Option {
	return []Option{WithLogger(p.Logger), WithRegisterer(p.Registerer)}
}

// Builder constructs a backend's Opener from configuration.
type Builder interface {
	// Name is the backend's name in configuration ("local", "kafka", ...).
	Name() string
	// Build validates the configuration and returns a ready Opener.
	Build(ctx context.Context, p BuildParams) (Opener, error)
}
