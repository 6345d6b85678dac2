package chain_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/meta/boltstore"
)

// A channel created on the local backend moves to Kafka: the intent, the
// seal (after the driver fenced the local segment at term 4 and read its
// end), and a checkpoint position taken before the move that still names
// its segment.
func Example() {
	dir, _ := os.MkdirTemp("", "chain-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	kv, err := boltstore.Open(filepath.Join(dir, "meta.db"), boltstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer kv.Close()
	s := chain.NewStore(kv, chain.Options{})

	if _, err := s.Create(ctx, "orders", chain.Backend{Name: "local", Kind: "local", Channel: "orders"}, 1); err != nil {
		log.Fatal(err)
	}
	kafka := chain.Backend{Name: "kafka", Kind: "kafka", Channel: "orders-s1", Params: []byte(`{"seedBrokers":["127.0.0.1:9092"]}`)}
	if _, err := s.BeginMigration(ctx, "orders", chain.MigrationRequest{Segment: 0, Target: kafka, Term: 4, By: "walctl"}); err != nil {
		log.Fatal(err)
	}
	// Here the driver opens segment 0 on the local backend at term 4 and
	// reads its last message (ID "17", timetick 100).
	c, err := s.Seal(ctx, "orders", chain.SealRequest{Segment: 0, Term: 4, End: "17", TimeTick: 100})
	if err != nil {
		log.Fatal(err)
	}
	for _, seg := range c.Segments {
		state := "writable"
		if seg.Seal != nil {
			state = seg.Seal.String()
		}
		fmt.Printf("segment %d on %s from term %d: %s\n", seg.Index, seg.Backend, seg.FirstTerm, state)
	}

	for _, text := range []string{"12", "s1/5"} {
		pos, err := cursor.ParsePosition(text)
		if err != nil {
			log.Fatal(err)
		}
		seg, err := c.Locate(pos)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("position %q: ID %s on %s\n", text, pos.ID, seg.Backend)
	}
	// Output:
	// segment 0 on local/orders from term 1: sealed at term 4, end 17, timetick 100
	// segment 1 on kafka/orders-s1 from term 4: writable
	// position "12": ID 12 on local/orders
	// position "s1/5": ID 5 on kafka/orders-s1
}
