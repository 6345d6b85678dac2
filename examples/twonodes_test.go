package examples_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// Two nodes on one local store (Store.NewOpener: one Opener per node) both
// believe they own a channel. Terms decide: opening term 2 fences term 1,
// whose appends then fail with walimpls.ErrFenced and are certainly not
// stored (walimpls.NotStored), and whose WAL becomes unavailable. A reader
// sees term 1's messages, then term 2's, never mixed.
func Example_twoNodes() {
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
	nodeA, nodeB := store.NewOpener(), store.NewOpener()
	quiet := adaptor.Options{Logger: slog.New(slog.DiscardHandler)}

	a, err := adaptor.Open(ctx, nodeA, adaptor.Channel{Name: "orders", Term: 1}, quiet)
	if err != nil {
		panic(err)
	}
	defer a.Close()
	appendText(ctx, a, "from A")

	// The coordinator moves the channel to node B at term 2.
	b, err := adaptor.Open(ctx, nodeB, adaptor.Channel{Name: "orders", Term: 2}, quiet)
	if err != nil {
		panic(err)
	}
	defer b.Close()
	appendText(ctx, b, "from B")

	m, err := message.New([]byte("from A, late"), nil)
	if err != nil {
		panic(err)
	}
	_, err = a.Append(ctx, m)
	fmt.Println("A's append is fenced:", errors.Is(err, walimpls.ErrFenced))
	fmt.Println("and certainly not stored:", walimpls.NotStored(err))
	var fenced *walimpls.FencedError
	if errors.As(err, &fenced) {
		fmt.Println("the channel is at term", fenced.CurrentTerm)
	}
	<-a.Available() // closed once A is fenced
	fmt.Println("A's Err is fenced:", errors.Is(a.Err(), walimpls.ErrFenced))

	// A stale owner cannot come back at its old term.
	_, err = adaptor.Open(ctx, nodeA, adaptor.Channel{Name: "orders", Term: 1}, quiet)
	fmt.Println("reopening term 1 is fenced:", errors.Is(err, walimpls.ErrFenced))

	s, err := b.Read(ctx, adaptor.ReadOption{Name: "reader"})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	for {
		m := receive(s)
		term, _ := m.Term()
		fmt.Printf("term %d: %s\n", term, m.Payload())
		if string(m.Payload()) == "from B" {
			break
		}
	}
	// Output:
	// A's append is fenced: true
	// and certainly not stored: true
	// the channel is at term 2
	// A's Err is fenced: true
	// reopening term 1 is fenced: true
	// term 1: from A
	// term 2: from B
}
