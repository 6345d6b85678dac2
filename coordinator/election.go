package coordinator

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// campaign runs concurrency.Election's protocol on Layout.Election(): put
// this candidate's key (prefix + "/" + hex lease ID, its ID as value,
// under the session's lease, created only if absent), then wait until
// every key created before it is gone. The keys are those of
// concurrency.NewElection(s, layout.Election()), so its Leader and
// Observe follow this election (walctl shows the leader that way).
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
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, c.cfg.ID, clientv3.WithLease(s.Lease()))).
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
		if err := c.waitDelete(ctx, string(older.Kvs[0].Key), older.Header.GetRevision()); err != nil {
			return fence{}, err
		}
	}
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
