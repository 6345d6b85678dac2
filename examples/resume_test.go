package examples_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// A consumer that survives restarts: after processing a message it saves
// the message's checkpoint (cursor.CheckpointOf, Marshal) where it keeps
// its own state; after a restart it parses the saved string
// (WAL.ParseCheckpoint) and reads with cursor.After, which delivers exactly
// the messages after it: nothing lost, nothing twice.
func Example_resumeAfterRestart() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "streamwal-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	walDir := filepath.Join(dir, "wal")
	saved := filepath.Join(dir, "consumer.checkpoint")

	// First run: three orders are appended; the consumer processes two,
	// saving a checkpoint after each, and the process stops.
	run(walDir, func(w adaptor.WAL) {
		for _, order := range []string{"order 1", "order 2", "order 3"} {
			appendText(ctx, w, order)
		}
		s, err := w.Read(ctx, adaptor.ReadOption{Name: "consumer"})
		if err != nil {
			panic(err)
		}
		defer s.Close()
		for range 2 {
			m := receive(s)
			fmt.Println("first run processed:", string(m.Payload()))
			cp, err := cursor.CheckpointOf(m)
			if err != nil {
				panic(err)
			}
			if err := os.WriteFile(saved, []byte(cp.Marshal()), 0o600); err != nil {
				panic(err)
			}
		}
	})

	// Second run: the store reopens from its directory and the writer
	// appends on; the consumer resumes after its checkpoint.
	run(walDir, func(w adaptor.WAL) {
		appendText(ctx, w, "order 4")
		text, err := os.ReadFile(saved)
		if err != nil {
			panic(err)
		}
		cp, err := w.ParseCheckpoint(string(text))
		if err != nil {
			panic(err)
		}
		s, err := w.Read(ctx, adaptor.ReadOption{Name: "consumer", DeliverPolicy: cursor.After(cp)})
		if err != nil {
			panic(err)
		}
		defer s.Close()
		for {
			m := receive(s)
			fmt.Println("second run processed:", string(m.Payload()))
			if string(m.Payload()) == "order 4" {
				return
			}
		}
	})
	// Output:
	// first run processed: order 1
	// first run processed: order 2
	// second run processed: order 3
	// second run processed: order 4
}

// run opens the local store in dir and the channel "orders" on it, as a
// process would, hands the WAL to f, and closes both.
func run(dir string, f func(adaptor.WAL)) {
	store, err := local.New(context.Background(), local.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	w, err := adaptor.Open(context.Background(), store, adaptor.Channel{Name: "orders", Term: 1},
		adaptor.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer w.Close()
	f(w)
}
