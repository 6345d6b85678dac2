package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/errors"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/utility/hlc"
	"github.com/streamwal/streamwal/walimpls"
)

// maxLast bounds tail -n (the node's bound on ReadRequest.last).
const maxLast = 10000

// startPosition is how tail prints, and -from takes, the position before
// the first message kept.
const startPosition = "start"

// checkServable refuses a channel nothing can serve: unknown, or whose
// owner is gone with no live node to take it over.
func checkServable(s cluster.Snapshot, channel string) error {
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return err
	}
	av, ok := s.Assignments[channel]
	if !ok {
		return errUnknownChannel(channel)
	}
	a := av.Value
	_, live := s.Nodes[a.Node]
	if !live && len(liveNodes(s, "")) == 0 {
		return errors.Newf("channel %q has no live owner (%s is gone) and no live node can take it over", channel, a.Node)
	}
	return nil
}

// append appends the arguments, or stdin's lines, one message each, with a
// progress line every second on a terminal when reading a pipe.
func (c *ctl) append(ctx context.Context, channel string, msgs []string) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	if err := checkServable(s, channel); err != nil {
		return err
	}
	cl, err := client.New(ctx, c.clientConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	send := func(text string) error {
		r, err := cl.Append(ctx, channel, client.Message{Payload: []byte(text)}, client.Options{})
		if err != nil {
			return err
		}
		if c.json {
			return json.NewEncoder(c.out).Encode(map[string]any{"id": r.ID, "timetick": r.TimeTick, "term": r.Term, "node": r.Node})
		}
		if len(msgs) > 0 {
			_, err = fmt.Fprintf(c.out, "%s at %s (term %d, node %s)\n", text, r.ID, r.Term, r.Node)
		}
		return err
	}
	if len(msgs) > 0 {
		for _, m := range msgs {
			if err := send(m); err != nil {
				return err
			}
		}
		return nil
	}
	sc := bufio.NewScanner(c.in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	n, last := 0, time.Now()
	for sc.Scan() {
		if err := send(sc.Text()); err != nil {
			return errors.Wrapf(err, "line %d", n+1)
		}
		n++
		if c.tty && time.Since(last) >= time.Second {
			fmt.Fprintf(c.errOut, "\rappended %d", n)
			last = time.Now()
		}
	}
	if c.tty {
		fmt.Fprintf(c.errOut, "\rappended %d\n", n)
	} else if !c.json {
		fmt.Fprintf(c.out, "appended %d\n", n)
	}
	return sc.Err()
}

// tail prints a channel's messages: from -from, the last -n, or the first
// kept; following the channel until interrupted, or until caught up.
func (c *ctl) tail(ctx context.Context, channel string) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	if err := checkServable(s, channel); err != nil {
		return err
	}
	o := c.opts
	opts := client.ReadOptions{UntilCaughtUp: o.untilCaughtUp}
	where := "from the first message kept"
	switch {
	case o.from != "" && o.from != startPosition:
		opts.After = o.from
		where = "from position " + o.from
	case o.last == 0:
		opts.Latest = true
		where = "from now on"
	}
	if o.last > 0 {
		opts.Last = o.last
		where = fmt.Sprintf("the last %d message(s) before now", o.last)
		if opts.After != "" {
			where += " after position " + o.from
		}
	}
	how := "then following (Ctrl-C to stop)"
	if o.untilCaughtUp {
		how = "until caught up with what was appended before now"
	}
	cl, err := client.New(ctx, c.clientConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	a := s.Assignments[channel].Value
	fmt.Fprintf(c.errOut, "tail %s (owner %s, term %d): %s, %s\n", channel, a.Node, a.Term, where, how)
	if !c.json {
		fmt.Fprintln(c.out, "POSITION\tTIME\tTERM\tPAYLOAD")
	}
	enc := json.NewEncoder(c.out)
	n := 0
	err = cl.Read(ctx, channel, opts, func(d *streamwalv1.Delivered) error {
		n++
		pos := d.GetPosition()
		if pos == "" && n == 1 && opts.After == "" && !opts.Latest {
			pos = startPosition
		}
		at := hlc.Physical(d.GetTimetick())
		if c.json {
			return enc.Encode(map[string]any{"position": pos, "checkpoint": d.GetCheckpoint(), "id": d.GetId(),
				"timetick": d.GetTimetick(), "time": at, "term": d.GetTerm(), "payload": string(d.GetPayload()),
				"properties": d.GetProperties(), "vchannel": d.GetVchannel()})
		}
		_, err := fmt.Fprintf(c.out, "%s\t%s\t%d\t%s\n", pos, at.Format("2006-01-02T15:04:05.000Z07:00"), d.GetTerm(), printable(d.GetPayload()))
		return err
	})
	if errors.Is(err, client.ErrRefused) && opts.After != "" {
		return errors.Wrapf(err, "-from %s (positions are those tail prints)", o.from)
	}
	if err == nil && o.untilCaughtUp {
		fmt.Fprintf(c.errOut, "caught up: %d message(s)\n", n)
	}
	return err
}

// printable is a payload as it can be printed on one line: as is when it
// is printable UTF-8 text, quoted otherwise.
func printable(p []byte) string {
	if utf8.Valid(p) && strings.IndexFunc(string(p), func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' && r != '\t' }) < 0 {
		return string(p)
	}
	return strconv.Quote(string(p))
}
