package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/streamwal/streamwal/cluster"
)

// campaign runs concurrency.Election's protocol on Layout.Election(): put
// this candidate's key (prefix + "/" + hex lease ID, its ID as value,
// under the session's lease, created only if absent), then wait until
// every key created before it is gone. The keys are those of
// concurrency.NewElection(s, layout.Election()), so its Leader and
// Observe follow this election. Beside its key, under the same lease, it
// puts its cluster.CandidateInfo.
//
// While it waits for a key, it watches the liveness of the node that runs
// in that candidate's process (its CandidateInfo.Node), unless
// Config.LeaseOnly: once that process is confirmed gone, it deletes the
// key instead of waiting for its lease (watchCandidate).
//
// It is not Election.Campaign because of one difference: when its context
// ends, Campaign deletes its key with the client's own context, which
// blocks for as long as etcd is unreachable, and so would Run. Here the
// key goes with the session's lease, which stepDown revokes within the
// TTL (or leaves to expire).
//
// The returned fence is the key and its create revision: the leader
// condition of every write.
func (c *Coordinator) campaign(ctx context.Context, s *concurrency.Session) (fence, error) {
	prefix := c.layout.Election() + "/"
	key := fmt.Sprintf("%s%x", prefix, s.Lease())
	info := cluster.Encode(cluster.CandidateInfo{ID: c.cfg.ID, Node: c.cfg.Node, Migrations: c.cfg.migrationTargets()})
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, c.cfg.ID, clientv3.WithLease(s.Lease())),
			clientv3.OpPut(c.layout.Candidate(int64(s.Lease())), string(info), clientv3.WithLease(s.Lease()))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fence{}, errors.Wrap(err, "coordinator: put election key")
	}
	f := fence{key: key, rev: resp.Header.GetRevision()}
	if !resp.Succeeded {
		// The session is new, so its key cannot exist; if it does, it is
		// ours all the same (same lease).
		var kvs []*mvccpb.KeyValue
		if len(resp.Responses) > 0 {
			kvs = resp.Responses[0].GetResponseRange().GetKvs()
		}
		if len(kvs) != 1 {
			return fence{}, errors.Newf("coordinator: election key %s neither created nor found", key)
		}
		f.rev = kvs[0].CreateRevision
	}
	for {
		older, err := c.cli.Get(ctx, prefix, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(f.rev-1))...)
		if err != nil {
			return fence{}, errors.Wrap(err, "coordinator: read election")
		}
		if len(older.Kvs) == 0 {
			return f, nil
		}
		prev := older.Kvs[0]
		wctx, cancel := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			if !c.cfg.LeaseOnly {
				c.watchCandidate(wctx, prev)
			}
		}()
		err = c.waitDelete(ctx, string(prev.Key), older.Header.GetRevision())
		cancel()
		<-watched
		if err != nil {
			return fence{}, err
		}
	}
}

// watchCandidate watches the process of the candidate whose election key
// is prev, through the node its CandidateInfo names, and deletes prev
// once that node's process is confirmed gone: on a refused connection
// (liveness.go), never on a timeout, so a stalled leader keeps its key.
// The delete is conditional on prev being the same key and the node
// still at the registration watched. A candidate that names no node, or
// whose node is not registered, is left to its lease. Returns when ctx
// ends or the key is deleted.
func (c *Coordinator) watchCandidate(ctx context.Context, prev *mvccpb.KeyValue) {
	infoKey := c.layout.Candidate(prev.Lease)
	resp, err := c.cli.Get(ctx, infoKey)
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	info, err := cluster.Decode[cluster.CandidateInfo](infoKey, resp.Kvs[0].Value)
	if err != nil || info.Node == "" {
		return
	}
	nodeKey := c.layout.Node(info.Node)
	resp, err = c.cli.Get(ctx, nodeKey)
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	node, err := cluster.Decode[cluster.NodeInfo](nodeKey, resp.Kvs[0].Value)
	if err != nil || node.Addr == "" {
		return
	}
	nodeRev := resp.Kvs[0].ModRevision
	var dead bool
	// Not timed (no TTL): a candidate waits for a silent leader's lease.
	c.liveness().watch(ctx, registration{node: info.Node, addr: node.Addr}, func(kind eventKind, _, _ time.Time) { dead = kind == eventDead })
	if !dead {
		return
	}
	// The delete's answer is awaited even once ctx ends: campaign ends ctx
	// as soon as its watch sees the key go, which is this very delete, and
	// would otherwise lose its count and log (bounded by the TTL).
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.SessionTTL)
	defer cancel()
	del, err := c.cli.Txn(dctx).
		If(clientv3.Compare(clientv3.CreateRevision(string(prev.Key)), "=", prev.CreateRevision),
			clientv3.Compare(clientv3.ModRevision(nodeKey), "=", nodeRev)).
		Then(clientv3.OpDelete(string(prev.Key)), clientv3.OpDelete(infoKey)).
		Commit()
	if err != nil || !del.Succeeded {
		return
	}
	c.metrics.deadCandidates.Inc()
	c.log.Warn("the candidate before this one is gone: its process's node refuses connections; its election key deleted",
		"predecessor", info.ID, "node", info.Node, "addr", node.Addr)
}

// waitDelete waits until key is deleted at a revision after rev.
func (c *Coordinator) waitDelete(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range c.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return errors.Wrap(err, "coordinator: watch election")
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("coordinator: election watch ended")
}

// resign deletes the election key if it is still the one of f.
func (c *Coordinator) resign(ctx context.Context, f fence) error {
	_, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(f.key), "=", f.rev)).
		Then(clientv3.OpDelete(f.key)).
		Commit()
	return err
}
