package coordinator

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/walimpls"
)

// The admin helpers write the request keys operators (and walctl) use to
// steer the leader. They only write the request; the leader acts on it at
// its next pass, or drops it (logged) when it cannot. A zero layout means
// cluster.DefaultRoot.

// RequestMove asks the leader to move channel to node to, or to the least
// loaded other live node if to is "". A request naming a node that is not
// live when the leader looks, or the current owner, is dropped. A later
// request for the same channel replaces an earlier one.
func RequestMove(ctx context.Context, cli *clientv3.Client, layout cluster.Layout, channel, to string) error {
	l, err := adminLayout(layout)
	if err != nil {
		return err
	}
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return errors.Wrap(err, "coordinator: request move")
	}
	if to != "" {
		if err := cluster.ValidateNodeID(to); err != nil {
			return errors.Wrap(err, "coordinator: request move")
		}
	}
	_, err = cli.Put(ctx, l.Move(channel), string(cluster.Encode(cluster.MoveRequest{To: to})))
	return errors.Wrapf(err, "coordinator: request move of %s", channel)
}

// RequestDrain asks the leader to move every channel off node and to give
// it none until Undrain. Draining a drained node changes nothing (its
// drain keeps its first time).
func RequestDrain(ctx context.Context, cli *clientv3.Client, layout cluster.Layout, node string) error {
	l, err := adminLayout(layout)
	if err != nil {
		return err
	}
	if err := cluster.ValidateNodeID(node); err != nil {
		return errors.Wrap(err, "coordinator: request drain")
	}
	key := l.Drain(node)
	_, err = cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(key), "=", 0)).
		Then(clientv3.OpPut(key, string(cluster.Encode(cluster.DrainRequest{Since: time.Now()})))).
		Commit()
	return errors.Wrapf(err, "coordinator: request drain of %s", node)
}

// Undrain withdraws a drain request: node gets channels again (new ones,
// and those whose owners are lost; the leader does not move others back).
func Undrain(ctx context.Context, cli *clientv3.Client, layout cluster.Layout, node string) error {
	l, err := adminLayout(layout)
	if err != nil {
		return err
	}
	if err := cluster.ValidateNodeID(node); err != nil {
		return errors.Wrap(err, "coordinator: undrain")
	}
	_, err = cli.Delete(ctx, l.Drain(node))
	return errors.Wrapf(err, "coordinator: undrain %s", node)
}

func adminLayout(l cluster.Layout) (cluster.Layout, error) {
	out, err := cluster.NewLayout(l.Root)
	return out, errors.Wrap(err, "coordinator")
}
