package adaptor

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// LogEnd is where a fenced log ends: what its readers may deliver, and the
// highest timetick up to there.
type LogEnd struct {
	// Last is the last position readers deliver (ReadOption.Until); zero
	// when the log holds nothing above the floor FenceEnd was given.
	Last message.ID
	// TimeTick is the highest timetick up to Last, or the floor when it is
	// higher: the next writer of the channel's chain allocates above it.
	TimeTick uint64
}

// FenceEnd ends a log for writers: it opens ch on opener read-write at
// ch.Term, which fences every writer of a lower term, reads where the log
// ends and the highest timetick up to there, and closes it. It is the
// fence-and-read step that seals a segment of a chain (package chain):
// every append a writer of a lower term had acknowledged lies at or before
// the returned Last, and nothing a writer appends after it is ever
// acknowledged.
//
// On a backend that fences (walimpls.Capabilities.Fencing) the open
// itself fences, and nothing is written: Last is the backend's last
// message after the open. On one that cannot, fencing is in the log: the
// open appends its term-begin and a watermark, like Open, and Last is that
// watermark (lower terms' messages after the term-begin are never
// acknowledged, and readers drop them).
//
// floor is the highest timetick of what came before the log (the previous
// seal's); a log holding no timetick above it delivers nothing, and its
// LogEnd is the zero Last with TimeTick floor. An open at ch.Term below a
// term already in the log fails with walimpls.ErrFenced: that caller is
// stale. Calling FenceEnd again at the same term is harmless on a backend
// that fences (a second open at a term fences the first); on one that
// cannot, it appends another term-begin at the same term.
func FenceEnd(ctx context.Context, opener walimpls.Opener, ch Channel, floor uint64, opts Options) (LogEnd, error) {
	if opener == nil {
		return LogEnd{}, errors.Wrap(ErrInvalidOptions, "nil opener")
	}
	if err := opts.Validate(); err != nil {
		return LogEnd{}, err
	}
	if opts.ReadOnly {
		return LogEnd{}, errors.Wrap(ErrInvalidOptions, "adaptor: fence: a read-only open fences nothing")
	}
	opts = opts.withDefaults()
	var end LogEnd
	var err error
	if opener.Capabilities().Fencing {
		end, err = fenceOpen(ctx, opener, ch, opts)
	} else {
		end, err = fenceInLog(ctx, opener, ch, opts)
	}
	if err != nil {
		return LogEnd{}, errors.Wrapf(err, "adaptor: fence %s at term %d", ch.Name, ch.Term)
	}
	if end.TimeTick <= floor {
		return LogEnd{TimeTick: floor}, nil
	}
	return end, nil
}

// fenceOpen fences by the backend's open and reads the end of the log
// with the open's recovery (a window from the end), writing nothing.
func fenceOpen(ctx context.Context, opener walimpls.Opener, ch Channel, opts Options) (LogEnd, error) {
	impl, err := opener.Open(ctx, walimpls.Channel{Name: ch.Name, Term: ch.Term, Mode: walimpls.ReadWrite})
	if err != nil {
		return LogEnd{}, err
	}
	defer func() { _ = impl.Close() }()
	last, err := impl.Last(ctx)
	if err != nil {
		return LogEnd{}, errors.Wrap(err, "find the end of the log")
	}
	s, r, err := recoverEnd(ctx, impl, true, opts.ScannerBufferBytes/4, last)
	if err != nil {
		return LogEnd{}, errors.Wrap(err, "recover the log")
	}
	_ = s.Close()
	if r.maxTerm > ch.Term {
		return LogEnd{}, walimpls.MarkNotStored(&walimpls.FencedError{Channel: ch.Name, Term: ch.Term, CurrentTerm: r.maxTerm})
	}
	return LogEnd{Last: last, TimeTick: r.maxTT}, nil
}

// fenceInLog fences by a term-begin in the log (Open) and ends the log at
// a watermark written after it.
func fenceInLog(ctx context.Context, opener walimpls.Opener, ch Channel, opts Options) (LogEnd, error) {
	opened, err := Open(ctx, opener, ch, opts)
	if err != nil {
		return LogEnd{}, err
	}
	w := opened.(*wal)
	defer func() { _ = w.Close() }()
	cp, err := w.marks.now(ctx)
	if err != nil {
		return LogEnd{}, errors.Wrap(err, "write the last watermark")
	}
	return LogEnd{Last: w.marks.lastWritten(), TimeTick: cp.TimeTick}, nil
}
