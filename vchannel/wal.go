package vchannel

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// WAL is one vchannel's view of its pchannel's WAL: appends are stamped
// with the vchannel, reads deliver its data messages only. It owns nothing;
// the pchannel's owner closes the pchannel. It is safe for concurrent use.
type WAL struct {
	w    adaptor.WAL
	name string
}

// New returns the view of vchannel name over the pchannel w. A name that
// walimpls.ValidateChannelName refuses is a walimpls.ErrInvalidChannel
// error.
func New(w adaptor.WAL, name string) (*WAL, error) {
	if w == nil {
		return nil, errors.New("vchannel: nil pchannel wal")
	}
	if err := walimpls.ValidateChannelName(name); err != nil {
		return nil, errors.Wrap(err, "vchannel")
	}
	return &WAL{w: w, name: name}, nil
}

// Name is the vchannel's name.
func (v *WAL) Name() string { return v.name }

// PChannel is the channel and term of the pchannel under the view.
func (v *WAL) PChannel() adaptor.Channel { return v.w.Channel() }

// stamp returns m belonging to the vchannel, or an ErrWrongVChannel error
// (marked not stored) when it names another one.
func (v *WAL) stamp(m message.Message) (message.Message, error) {
	switch vc := m.VChannel(); vc {
	case v.name:
		return m, nil
	case "":
		return m.WithVChannel(v.name), nil
	default:
		return m, walimpls.MarkNotStored(errors.Wrapf(ErrWrongVChannel, "vchannel %s: append of a message of vchannel %q", v.name, vc))
	}
}

// Append stamps m with the vchannel and appends it (adaptor.WAL.Append).
func (v *WAL) Append(ctx context.Context, m message.Message) (adaptor.AppendResult, error) {
	m, err := v.stamp(m)
	if err != nil {
		return adaptor.AppendResult{}, err
	}
	return v.w.Append(ctx, m)
}

// AppendAsync stamps m with the vchannel and appends it in the background
// (adaptor.WAL.AppendAsync): cb is called exactly once, also when m is
// refused. A refusal is answered as the pchannel answers its own appends
// (adaptor.AnswerAsync): on its callback goroutine, one at a time with its
// other callbacks and in answer order, waited for by its Close; on the
// caller's goroutine when the pchannel is closed, or when it does not
// implement adaptor.AsyncAnswerer (a wrapper that does not forward it).
func (v *WAL) AppendAsync(ctx context.Context, m message.Message, cb func(adaptor.AppendResult, error)) {
	m, err := v.stamp(m)
	if err != nil {
		adaptor.AnswerAsync(v.w, cb, adaptor.AppendResult{}, err)
		return
	}
	v.w.AppendAsync(ctx, m, cb)
}

// AppendBatch stamps every message with the vchannel and appends them
// (adaptor.WAL.AppendBatch). A batch holding a message of another vchannel
// is refused whole: nothing is appended.
func (v *WAL) AppendBatch(ctx context.Context, msgs []message.Message) ([]adaptor.AppendResult, error) {
	stamped := make([]message.Message, len(msgs))
	for i, m := range msgs {
		s, err := v.stamp(m)
		if err != nil {
			return make([]adaptor.AppendResult, len(msgs)), errors.Wrapf(err, "batch message %d", i)
		}
		stamped[i] = s
	}
	return v.w.AppendBatch(ctx, stamped)
}

// Read starts a scanner of the vchannel's data messages, in timetick order,
// from opt.DeliverPolicy. opt.Filter.VChannels may be empty or name this
// vchannel only; any other is ErrWrongVChannel. Control kinds asked for in
// opt.Filter.Kinds are the pchannel's (see the package documentation).
func (v *WAL) Read(ctx context.Context, opt adaptor.ReadOption) (walimpls.Scanner, error) {
	opt, err := v.readOption(opt)
	if err != nil {
		return nil, err
	}
	return v.w.Read(ctx, opt)
}

// ReadBatches is Read delivering several messages per receive
// (adaptor.WAL.ReadBatches).
func (v *WAL) ReadBatches(ctx context.Context, opt adaptor.ReadOption) (walimpls.BatchScanner, error) {
	opt, err := v.readOption(opt)
	if err != nil {
		return nil, err
	}
	return v.w.ReadBatches(ctx, opt)
}

// readOption narrows opt to the vchannel.
func (v *WAL) readOption(opt adaptor.ReadOption) (adaptor.ReadOption, error) {
	for _, vc := range opt.Filter.VChannels {
		if vc != v.name {
			return opt, errors.Wrapf(ErrWrongVChannel, "vchannel %s: read filter names vchannel %q", v.name, vc)
		}
	}
	opt.Filter.VChannels = []string{v.name}
	if opt.Name == "" {
		opt.Name = v.name
	}
	return opt, nil
}

// Sync appends a watermark to the pchannel (adaptor.WAL.Sync).
func (v *WAL) Sync(ctx context.Context) error { return v.w.Sync(ctx) }

// ParseCheckpoint decodes a checkpoint string (adaptor.WAL.ParseCheckpoint).
func (v *WAL) ParseCheckpoint(s string) (cursor.Checkpoint, error) { return v.w.ParseCheckpoint(s) }

// Available is the pchannel's: closed when it can no longer append.
func (v *WAL) Available() <-chan struct{} { return v.w.Available() }

// Err is the pchannel's: why Available closed, nil while it is available.
func (v *WAL) Err() error { return v.w.Err() }
