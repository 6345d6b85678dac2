package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// A consumer reads a channel, processes each message, and commits its
// checkpoint every few messages: the channel's owner may then delete what
// lies before it. When the consumer restarts, it asks where it resumes
// (Checkpoint) and reads on after it: what it processed after its last
// commit comes again (at least once), nothing is skipped.
func Example_consumer() {
	ctx := context.Background()
	etcd, root, stop := exampleCluster(ctx, "orders", 10) // a node owning "orders", with m0..m9 appended
	defer stop()
	c, err := client.New(ctx, client.Config{Etcd: etcd, Root: root})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// consume runs the consumer "indexer" until it caught up, or until it
	// processed crashAfter messages.
	errCrash := errors.New("crash")
	consume := func(crashAfter int) {
		after, err := c.Checkpoint(ctx, "orders", "indexer", "")
		switch {
		case errors.Is(err, client.ErrNoCheckpoint):
			fmt.Println("no checkpoint: from the first message kept")
		case err != nil:
			panic(err)
		default:
			fmt.Println("resuming after the last commit")
		}
		n := 0
		err = c.Read(ctx, "orders", client.ReadOptions{After: after, UntilCaughtUp: true}, func(d *streamwalv1.Delivered) error {
			fmt.Println("processed", string(d.GetPayload())) // durably: a database write, an index update
			n++
			if n%4 == 0 {
				_, err := c.Commit(ctx, "orders", "indexer", d.GetCheckpoint(), client.CommitOptions{})
				if err != nil {
					// errors.Is(err, client.ErrCheckpointBackwards): another
					// instance of "indexer" committed further; this one is
					// stale, and stops.
					return err
				}
				fmt.Println("committed after", string(d.GetPayload()))
			}
			if n == crashAfter {
				return errCrash
			}
			return nil
		})
		if err != nil && !errors.Is(err, errCrash) {
			panic(err)
		}
	}
	consume(6)
	fmt.Println("-- restart --")
	consume(0)

	// Output:
	// no checkpoint: from the first message kept
	// processed m0
	// processed m1
	// processed m2
	// processed m3
	// committed after m3
	// processed m4
	// processed m5
	// -- restart --
	// resuming after the last commit
	// processed m4
	// processed m5
	// processed m6
	// processed m7
	// committed after m7
	// processed m8
	// processed m9
}

// exampleCluster starts a node that keeps consumers' checkpoints (on the
// test's etcd, under a root of its own), assigns it channel and appends n
// messages to it; stop stops everything.
func exampleCluster(ctx context.Context, channel string, n int) (etcd *clientv3.Client, root string, stop func()) {
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	must(err)
	prefix := fmt.Sprintf("/example/%d/", time.Now().UnixNano())
	root = prefix + "cluster/"
	kv, err := etcdstore.New(etcd, etcdstore.Options{Prefix: prefix + "meta/"})
	must(err)
	store, err := consumers.NewStore(kv, consumers.Options{})
	must(err)
	o, err := memory.New(ctx, memory.Config{Cluster: memory.NewCluster()})
	must(err)
	nd, err := node.New(etcd, o, node.Config{ID: "n1", Root: root, SessionTTL: 2 * time.Second, Backend: "memory", Consumers: store})
	must(err)
	must(nd.Start(ctx))
	stop = func() {
		_ = nd.Shutdown(ctx)
		_ = o.Close()
		_ = kv.Close()
		_ = etcd.Close()
	}
	layout, err := cluster.NewLayout(root)
	must(err)
	a := cluster.Assignment{Channel: channel, Node: "n1", Term: 1, State: cluster.Assigning}
	_, err = etcd.Put(ctx, layout.Assignment(channel), string(cluster.Encode(a)))
	must(err)
	c, err := client.New(ctx, client.Config{Etcd: etcd, Root: root})
	must(err)
	defer c.Close()
	for i := range n {
		_, err := c.Append(ctx, channel, client.Message{Payload: fmt.Appendf(nil, "m%d", i)}, client.Options{})
		must(err)
	}
	return etcd, root, stop
}
