package pool_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/vchannel"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// A node keeps its control data in a bbolt file beside its local log,
// allocates vchannels from a pool of four pchannels, writes and reads one
// vchannel through a view of its pchannel's WAL, and saves its checkpoint.
func Example() {
	dir, _ := os.MkdirTemp("", "pool-example-")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	store, err := boltstore.Open(filepath.Join(dir, "meta.db"), boltstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	backend, err := local.New(context.Background(), local.Config{Dir: filepath.Join(dir, "wal")})
	if err != nil {
		log.Fatal(err)
	}
	defer backend.Close()

	p, err := pool.Open(ctx, store, pool.Backend{Name: local.Name, Opener: backend},
		pool.Config{Size: 4, Prefix: "pch-"}, pool.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	as, err := p.Allocate(ctx, "orders", "users")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(as[0].VChannel, "->", as[0].PChannel)
	fmt.Println(as[1].VChannel, "->", as[1].PChannel)

	// The node that owns pch-0 (at term 1) writes and reads "orders".
	opts, _ := pool.DecodeWALOptions(as[0].Options)
	w, err := adaptor.Open(ctx, backend, adaptor.Channel{Name: opts.PChannel, Term: 1}, adaptor.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	orders, _ := vchannel.New(w, opts.VChannel)
	for _, s := range []string{"o-1", "o-2"} {
		m, _ := message.New([]byte(s), nil)
		if _, err := orders.Append(ctx, m); err != nil {
			log.Fatal(err)
		}
	}
	s, err := orders.Read(ctx, adaptor.ReadOption{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	var last message.Immutable
	for range 2 {
		last = <-s.Chan()
		fmt.Println("read", string(last.Payload()))
	}
	cp, _ := cursor.CheckpointOf(last)
	if err := p.SaveCheckpoint(ctx, "orders", 1, cp); err != nil {
		log.Fatal(err)
	}
	text, term, _ := p.Checkpoint(ctx, "orders")
	back, _ := w.ParseCheckpoint(text)
	fmt.Println("checkpoint saved at term", term, back.TimeTick == cp.TimeTick)
	// Output:
	// orders -> pch-0
	// users -> pch-1
	// read o-1
	// read o-2
	// checkpoint saved at term 1 true
}
