// Package readback reads a channel's data payloads straight from a
// backend, below the node and the WAL, for tests that check what was (and
// was not) stored.
package readback

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Payloads opens channel read-only through o and returns the payloads of
// its data messages from the start up to and including the first whose
// payload is last, or an error when ctx ends first or the scanner ends.
func Payloads(ctx context.Context, o walimpls.Opener, channel, last string) ([]string, error) {
	w, err := o.Open(ctx, walimpls.Channel{Name: channel, Mode: walimpls.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Close() }()
	sc, err := w.Read(ctx, walimpls.ReadOption{Name: "readback"})
	if err != nil {
		return nil, err
	}
	defer func() { _ = sc.Close() }()
	var out []string
	for {
		select {
		case m, ok := <-sc.Chan():
			if !ok {
				return out, errors.Wrapf(sc.Error(), "readback: scanner of %q ended before %q", channel, last)
			}
			if m.Kind() != message.KindData {
				continue
			}
			out = append(out, string(m.Payload()))
			if string(m.Payload()) == last {
				return out, nil
			}
		case <-ctx.Done():
			return out, errors.Wrapf(ctx.Err(), "readback: %q never read back", last)
		}
	}
}
