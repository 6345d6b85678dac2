package walmanager_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walmanager"
)

// A node embeds the manager over a backend: the coordinator's assignments
// become Open and Remove calls, and the node's code appends and reads
// through the WAL the manager hands out.
func Example() {
	ctx := context.Background()
	backend, err := memory.New(context.Background(), memory.Config{Cluster: memory.NewCluster()})
	if err != nil {
		panic(err)
	}
	defer backend.Close()
	quiet := slog.New(slog.DiscardHandler)
	mgr, err := walmanager.New(walmanager.WALOpenerFunc(func(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error) {
		return adaptor.Open(ctx, backend, ch, adaptor.Options{Logger: quiet})
	}), walmanager.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer mgr.Close(ctx)

	ch := walmanager.Channel{Name: "orders", Term: 1} // assigned by the coordinator
	if err := mgr.Open(ctx, ch); err != nil {
		panic(err)
	}
	w, err := mgr.GetAvailableWAL(ch)
	if err != nil {
		panic(err)
	}
	s, err := w.Read(ctx, adaptor.ReadOption{Name: "consumer"})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	m, err := message.New([]byte("order 42 placed"), map[string]string{"region": "eu"})
	if err != nil {
		panic(err)
	}
	if _, err := w.Append(ctx, m); err != nil {
		panic(err)
	}
	if err := w.Sync(ctx); err != nil { // release it to scanners now
		panic(err)
	}
	got := <-s.Chan()
	region, _ := got.Properties().Get("region")
	fmt.Println(string(got.Payload()), region)
	// Output: order 42 placed eu
}
