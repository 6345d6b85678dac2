package examples_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walconfig"
)

// The embedded local backend, chosen and configured by a configuration file
// (here a string; walconfig.Load reads a file): Build returns the backend's
// Opener, adaptor.Open turns it into a channel's WAL, and a scanner of that
// WAL reads the appends back.
func Example_localBackend() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "streamwal-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	cfg, err := walconfig.Parse(fmt.Appendf(nil, `
backend: local
local:
  dir: %q
  sync: always   # acknowledge an append only once it is fdatasynced
`, dir))
	if err != nil {
		panic(err) // a *walconfig.ConfigError naming the line and key
	}
	backend, err := walconfig.Build(ctx, cfg, walconfig.Deps{})
	if err != nil {
		panic(err)
	}
	defer backend.Close() // closes the store: after every WAL of it
	// backend.Local is the store itself: its recovery report, more openers.
	if r := backend.Local.Recovery(); r.DroppedBytes > 0 {
		fmt.Println("recovery cut a torn tail:", r.Reason)
	}

	w, err := adaptor.Open(ctx, backend, adaptor.Channel{Name: "orders", Term: 1}, adaptor.Options{})
	if err != nil {
		panic(err)
	}
	defer w.Close()

	for _, order := range []string{"order 1", "order 2", "order 3"} {
		m, err := message.New([]byte(order), nil)
		if err != nil {
			panic(err)
		}
		if _, err := w.Append(ctx, m); err != nil {
			panic(err)
		}
	}

	// A scanner of the writing WAL delivers every acknowledged append, in
	// order, without waiting for a watermark (see adaptor's "Local
	// releases"). cursor.All starts at the first message kept.
	s, err := w.Read(ctx, adaptor.ReadOption{Name: "example", DeliverPolicy: cursor.All()})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	for range 3 {
		m, ok := <-s.Chan()
		if !ok {
			panic(s.Error())
		}
		fmt.Println(string(m.Payload()))
	}

	// The log lives in segment files of the configured directory.
	segments, err := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	if err != nil {
		panic(err)
	}
	for _, seg := range segments {
		fmt.Println(filepath.Base(seg))
	}
	// Output:
	// order 1
	// order 2
	// order 3
	// wal-0000000000000001.log
}
