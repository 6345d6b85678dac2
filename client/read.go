package client

import (
	"context"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
)

// ReadOptions tune Read.
type ReadOptions struct {
	// After is the checkpoint (Delivered.Checkpoint) to resume after; empty
	// reads from the first message kept.
	After string
	// Latest starts at the end instead: only messages appended from now on.
	Latest bool
	// VChannels keeps only these vchannels (empty: all).
	VChannels []string
	// TermBegins also delivers term-begin messages (Kind "term-begin").
	TermBegins bool
}

// Read delivers a channel's messages to fn in timetick order, following the
// tail and the channel's owner: when the owner changes or its stream breaks,
// it reads on from the new owner after the last checkpoint it delivered,
// so nothing is lost or delivered twice. It returns when ctx ends (nil),
// when fn returns an error (that error), or when the read is refused (a
// truncated start: ErrRefused).
func (c *Client) Read(ctx context.Context, channel string, opts ReadOptions, fn func(*streamwalv1.Delivered) error) error {
	after := opts.After
	latest := opts.Latest && after == ""
	for attempt := 0; ; attempt++ {
		addr, _, err := c.owner(ctx, channel, "", attempt)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		cl, err := c.conn(addr)
		if err != nil {
			return err
		}
		req := &streamwalv1.ReadRequest{Channel: channel, Vchannels: opts.VChannels, TermBegins: opts.TermBegins}
		switch {
		case after != "":
			req.Start = &streamwalv1.ReadRequest_AfterCheckpoint{AfterCheckpoint: after}
		case latest:
			req.Start = &streamwalv1.ReadRequest_Latest{Latest: true}
		}
		stream, err := cl.Read(ctx, connect.NewRequest(req))
		if err != nil {
			if ctx.Err() != nil {
				return nil
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
				if d.GetCheckpoint() != "" {
					after, latest = d.GetCheckpoint(), false
				}
			}
		}
		err = stream.Err()
		_ = stream.Close()
		switch {
		case ctx.Err() != nil:
			return nil
		case connect.CodeOf(err) == connect.CodeOutOfRange, connect.CodeOf(err) == connect.CodeInvalidArgument:
			return errors.Mark(err, ErrRefused)
		}
		c.log.Debug("read stream ended; following the owner", "channel", channel, "error", err)
	}
}
