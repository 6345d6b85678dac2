package client

import (
	"context"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/internal/errmark"
)

// ReadOptions tune Read.
type ReadOptions struct {
	// After is the checkpoint (Delivered.Checkpoint) to resume after; empty
	// reads from the first message kept. A Delivered.Position starts the
	// read at that message.
	After string
	// Latest starts at the end instead: only messages appended from now on.
	Latest bool
	// VChannels keeps only these vchannels (empty: all).
	VChannels []string
	// TermBegins also delivers term-begin messages (Kind "term-begin").
	TermBegins bool
	// UntilCaughtUp ends the read, with nil, once every message
	// acknowledged before it started has been delivered; if ctx ends
	// first, Read returns ctx's error.
	UntilCaughtUp bool
	// Last delivers only the last Last of the messages acknowledged before
	// the read started (after After, if set), then goes on; 0 delivers
	// them all. At most 10000.
	Last int
}

// Read delivers a channel's messages to fn in timetick order, following the
// tail and the channel's owner: when the owner changes or its stream breaks,
// it reads on from the new owner after the last checkpoint it delivered,
// so nothing is lost or delivered twice. It returns when ctx ends (nil,
// or ctx's error with UntilCaughtUp), when it has caught up
// (UntilCaughtUp: nil), when fn returns an error (that error), or when the
// read is refused (a truncated start, bad options: ErrRefused).
func (c *Client) Read(ctx context.Context, channel string, opts ReadOptions, fn func(*streamwalv1.Delivered) error) error {
	if opts.Last < 0 {
		return errors.Wrapf(ErrRefused, "client: negative Last %d", opts.Last)
	}
	after := opts.After
	latest := opts.Latest && after == ""
	last := opts.Last
	// ended is Read's answer once ctx ends.
	ended := func() error {
		if opts.UntilCaughtUp {
			return errors.Wrapf(ctx.Err(), "client: read of %q ended before catching up", channel)
		}
		return nil
	}
	// unwatch ends the watch of the current stream (moves.go): a stream
	// from an owner the channel moved away from is abandoned, and the read
	// goes on at the new owner.
	var unwatch func() (moved bool)
	defer func() {
		if unwatch != nil {
			unwatch()
		}
	}()
	for attempt := 0; ; attempt++ {
		if unwatch != nil {
			unwatch()
			unwatch = nil
		}
		tg, err := c.owner(ctx, channel, nil, attempt)
		if err != nil {
			if ctx.Err() != nil {
				return ended()
			}
			return err
		}
		addr := tg.addr
		cl, err := c.readConn(addr)
		if err != nil {
			return err
		}
		// A stream that broke is resumed after the last message delivered:
		// once one was, nothing is held back any more (Last), so nothing
		// is skipped.
		req := &streamwalv1.ReadRequest{Channel: channel, Vchannels: opts.VChannels, TermBegins: opts.TermBegins,
			UntilCaughtUp: opts.UntilCaughtUp, Last: uint32(last)}
		switch {
		case after != "":
			req.Start = &streamwalv1.ReadRequest_AfterCheckpoint{AfterCheckpoint: after}
		case latest:
			req.Start = &streamwalv1.ReadRequest_Latest{Latest: true}
		}
		sctx, uw := c.moves.watch(ctx, channel, tg)
		unwatch = uw
		stream, err := cl.Read(sctx, connect.NewRequest(req))
		if err != nil {
			if ctx.Err() != nil {
				return ended()
			}
			if unwatch() {
				continue // abandoned: the channel moved
			}
			if readRefused(connect.CodeOf(err)) {
				return errmark.Mark(err, ErrRefused)
			}
			if terr := c.tlsRefusal(ctx, addr, err); terr != nil {
				return errmark.Mark(errors.Wrapf(terr, "client: read %q at %s", channel, addr), ErrRefused)
			}
			continue
		}
		for stream.Receive() {
			attempt = 0
			for _, d := range stream.Msg().GetMessages() {
				if err := fn(d); err != nil {
					_ = stream.Close()
					return err
				}
				last = 0
				if d.GetCheckpoint() != "" {
					after, latest = d.GetCheckpoint(), false
				}
			}
			if stream.Msg().GetCaughtUp() {
				if opts.UntilCaughtUp {
					_ = stream.Close()
					return nil
				}
				last = 0
			}
		}
		err = stream.Err()
		_ = stream.Close()
		moved := unwatch()
		switch {
		case ctx.Err() != nil:
			return ended()
		case moved:
			// Abandoned: its node no longer owns the channel.
		case readRefused(connect.CodeOf(err)):
			return errmark.Mark(err, ErrRefused)
		case err != nil:
			if terr := c.tlsRefusal(ctx, addr, err); terr != nil {
				return errmark.Mark(errors.Wrapf(terr, "client: read %q at %s", channel, addr), ErrRefused)
			}
		}
		c.log.Debug("read stream ended; following the owner", "channel", channel, "node", tg.node, "moved", moved, "error", err)
	}
}

// readRefused reports whether a read's error is a refusal for good.
func readRefused(code connect.Code) bool {
	switch code {
	case connect.CodeOutOfRange, connect.CodeInvalidArgument, connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return true
	}
	return false
}
