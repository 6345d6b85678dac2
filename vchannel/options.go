package vchannel

import (
	"fmt"
	"log/slog"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/walimpls"
)

// Consumer is one vchannel to replay and where it resumes.
type Consumer struct {
	// VChannel names the vchannel.
	VChannel string
	// After is the checkpoint of the last message the consumer processed
	// (cursor.CheckpointOf): it is delivered what comes after it. The zero
	// checkpoint replays from the start of the kept log.
	After cursor.Checkpoint
	// BufferBytes is this consumer's budget (see ReplayOptions.BufferBytes);
	// 0 takes ReplayOptions.BufferBytes.
	BufferBytes int
}

// ReplayOptions tune a replay. The zero value takes every default.
type ReplayOptions struct {
	// Name names the shared scanner in the adaptor's logs and metrics; a
	// detached consumer's own scanner is named Name + "/" + its vchannel.
	// Default "replay".
	Name string
	// BufferBytes is each consumer's budget unless its Consumer.BufferBytes
	// says otherwise: the bytes (message.Size plus 64 per message) handed to
	// its stream and not yet taken by its reader. A consumer that would go
	// above it while another consumer waits for the shared reader is
	// detached (see the package documentation). A message larger than the
	// budget is still handed to an empty stream. Default 1 MiB.
	BufferBytes int
	// Logger receives a line per detachment, with the pchannel and the
	// vchannel as attributes; nil discards them, as in every other layer
	// of streamwal.
	Logger *slog.Logger
	// CatchUpTo is the point the consumers catch up to (Replayer.CaughtUp):
	// a consumer is caught up once its reader received every message of
	// its vchannel with a timetick at or below CatchUpTo's. Give a
	// checkpoint adaptor.WAL.Tail returned on the pchannel, by this process
	// or by the pchannel's writer elsewhere: every message acknowledged
	// before that call is at or below it. (Any checkpoint works, a
	// message's too; only its timetick counts.) Zero: Replay takes the
	// WAL's Tail as it starts (it appends one watermark), so that caught up
	// means "received every message acknowledged before Replay was
	// called". A read-only WAL has no tail to take (walimpls.ErrReadOnly):
	// without CatchUpTo its replay has no point to catch up to, and
	// CaughtUp reports false.
	CatchUpTo cursor.Checkpoint

	// onDetach, when set, is called by the router right after it detached
	// a vchannel (tests wait on it).
	onDetach func(vchannel string)
}

const (
	defaultReplayName  = "replay"
	defaultBufferBytes = 1 << 20
	// messageOverhead is what a message costs beyond its Size, as the
	// adaptor counts it.
	messageOverhead = 64
)

// Validate reports options no replay can use.
func (o ReplayOptions) Validate() error {
	if o.BufferBytes < 0 {
		return errors.Wrapf(ErrInvalidReplay, "BufferBytes is negative (%d)", o.BufferBytes)
	}
	if !o.CatchUpTo.IsZero() && o.CatchUpTo.TimeTick == 0 {
		return errors.Wrapf(ErrInvalidReplay, "CatchUpTo %s is not a tail (it needs a timetick)", o.CatchUpTo)
	}
	return nil
}

func (o ReplayOptions) withDefaults() ReplayOptions {
	if o.Name == "" {
		o.Name = defaultReplayName
	}
	if o.BufferBytes == 0 {
		o.BufferBytes = defaultBufferBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// validateConsumers checks the consumers of one replay: at least one, valid
// and distinct vchannel names, checkpoints that are zero or carry both a
// position and a timetick.
func validateConsumers(consumers []Consumer) error {
	if len(consumers) == 0 {
		return errors.Wrap(ErrInvalidReplay, "no consumers")
	}
	seen := make(map[string]struct{}, len(consumers))
	for _, c := range consumers {
		if err := walimpls.ValidateChannelName(c.VChannel); err != nil {
			return errors.Wrapf(err, "consumer %q", c.VChannel)
		}
		if _, dup := seen[c.VChannel]; dup {
			return errors.Wrapf(ErrInvalidReplay, "vchannel %q named by two consumers", c.VChannel)
		}
		seen[c.VChannel] = struct{}{}
		if c.BufferBytes < 0 {
			return errors.Wrapf(ErrInvalidReplay, "consumer %q: BufferBytes is negative (%d)", c.VChannel, c.BufferBytes)
		}
		if !c.After.IsZero() && (c.After.Position.IsZero() || c.After.TimeTick == 0) {
			return errors.Wrapf(ErrInvalidReplay, "consumer %q: %s is not a checkpoint (it needs a position and a timetick)", c.VChannel, c.After)
		}
	}
	return nil
}

// earliest returns where a scanner starts that finds everything every
// consumer needs: the lowest of their positions, delivering the timeticks
// above the lowest of their timeticks; the zero checkpoint when one of them
// starts from the beginning. Checkpoints whose positions do not compare
// (another backend's) are an ErrInvalidReplay error.
func earliest(consumers []Consumer) (cursor.Checkpoint, error) {
	var start cursor.Checkpoint
	for i, c := range consumers {
		if c.After.IsZero() {
			return cursor.Checkpoint{}, nil
		}
		if i == 0 {
			start = c.After
			continue
		}
		n, err := c.After.Position.Compare(start.Position)
		if err != nil {
			return cursor.Checkpoint{}, &invalidReplayError{
				what: fmt.Sprintf("consumer %q: checkpoint %s", c.VChannel, c.After), cause: err}
		}
		if n < 0 {
			start.Position = c.After.Position
		}
		start.TimeTick = min(start.TimeTick, c.After.TimeTick)
	}
	return start, nil
}
