package examples_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// A leader appends; a follower tails the same channel through a read-only
// WAL. They see an append at different times:
//
//   - the leader's own scanners see it as soon as Append returns: the
//     writer knows what it acknowledged, and releases it to them without a
//     watermark in the log (adaptor's "Local releases");
//   - every other reader — a read-only WAL, another process — follows
//     watermarks in the log: it sees the append once the leader writes the
//     next watermark, at most Options.TimeTickInterval later (200ms by
//     default), or at once when the leader calls Sync.
//
// The interval is an hour here, so that no periodic watermark comes in
// between and the output does not depend on timing. The follower is a
// second Opener of the same store; the local backend keeps a root to one
// process, but a follower on another machine reading Kafka or Pulsar sees
// the same lag.
func Example_leaderAndFollower() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "streamwal-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := local.New(ctx, local.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	quiet := slog.New(slog.DiscardHandler)
	ch := adaptor.Channel{Name: "orders", Term: 1}
	leader, err := adaptor.Open(ctx, store, ch, adaptor.Options{Logger: quiet, TimeTickInterval: time.Hour})
	if err != nil {
		panic(err)
	}
	defer leader.Close()
	follower, err := adaptor.Open(ctx, store.NewOpener(), ch, adaptor.Options{Logger: quiet, ReadOnly: true})
	if err != nil {
		panic(err)
	}
	defer follower.Close()

	own, err := leader.Read(ctx, adaptor.ReadOption{Name: "leader"})
	if err != nil {
		panic(err)
	}
	defer own.Close()
	tailing, err := follower.Read(ctx, adaptor.ReadOption{Name: "follower"})
	if err != nil {
		panic(err)
	}
	defer tailing.Close()

	m, err := message.New([]byte("order 1"), nil)
	if err != nil {
		panic(err)
	}
	if _, err := leader.Append(ctx, m); err != nil {
		panic(err)
	}
	fmt.Println("leader's scanner:", string(receive(own).Payload()))

	// No watermark covers the append yet: the follower holds nothing back
	// to deliver.
	select {
	case m := <-tailing.Chan():
		fmt.Println("follower, before the watermark:", string(m.Payload()))
	default:
		fmt.Println("follower, before the watermark: nothing yet")
	}

	// Sync writes a watermark now: once it returns, everything appended
	// before it is released to every reader of the log.
	if err := leader.Sync(ctx); err != nil {
		panic(err)
	}
	fmt.Println("follower, after Sync:", string(receive(tailing).Payload()))

	// A read-only WAL writes no watermark: it cannot Sync or Tail.
	_, err = follower.Tail(ctx)
	fmt.Println("follower's Tail is ErrReadOnly:", errors.Is(err, walimpls.ErrReadOnly))
	// Output:
	// leader's scanner: order 1
	// follower, before the watermark: nothing yet
	// follower, after Sync: order 1
	// follower's Tail is ErrReadOnly: true
}
