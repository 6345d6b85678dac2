package coordinator

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/walimpls"
)

// Sentinel errors of the admin helpers, checked with errors.Is.
var (
	// ErrMigrateRequested means a migration of the channel to another
	// backend is requested already: one at a time (cancel it first).
	ErrMigrateRequested = errors.New("coordinator: another migration of the channel is requested")
	// ErrMigrationSealed means the migration was sealed: the channel
	// writes on its new segment, and only migrating back undoes it.
	ErrMigrationSealed = errors.New("coordinator: migration sealed already")
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

// RequestMigrate asks the leader to move channel's writes to the backend
// entry to (of the nodes' configuration), by (who asks, recorded in the
// chain). It returns the request's revision, the key walctl watches. One
// migration per channel at a time: asking again for the same backend
// returns the request that is there; for another, ErrMigrateRequested.
// The leader deletes the request once the channel's chain ends on to, or
// refuses it (cluster.MoveRefusal, Kind cluster.RefusedMigrate).
func RequestMigrate(ctx context.Context, cli *clientv3.Client, layout cluster.Layout, channel, to, by string) (int64, error) {
	l, err := adminLayout(layout)
	if err != nil {
		return 0, err
	}
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return 0, errors.Wrap(err, "coordinator: request migration")
	}
	if err := walimpls.ValidateChannelName(to); err != nil {
		return 0, errors.Wrap(err, "coordinator: request migration: backend entry name")
	}
	key := l.Migrate(channel)
	req := cluster.MigrateRequest{To: to, By: by, At: time.Now().UTC()}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(key), "=", 0)).
		Then(clientv3.OpPut(key, string(cluster.Encode(req)))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return 0, errors.Wrapf(err, "coordinator: request migration of %s", channel)
	}
	if resp.Succeeded {
		return resp.Header.GetRevision(), nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 {
		return 0, errors.Newf("coordinator: request migration of %s: the request was there, then gone: try again", channel)
	}
	there, err := cluster.Decode[cluster.MigrateRequest](key, kvs[0].Value)
	if err != nil {
		return 0, err
	}
	if there.To == to {
		return kvs[0].ModRevision, nil
	}
	return 0, errors.Wrapf(ErrMigrateRequested, "coordinator: migrate %s to %s: a migration to %s is requested already (by %q at %s): cancel it first",
		channel, to, there.To, there.By, there.At.Format(time.RFC3339))
}

// CancelMigrate withdraws channel's migrate request and cancels the
// migration pending in its chain (kept in store), before its seal only:
// once sealed it is ErrMigrationSealed (migrate back to undo it). With
// neither a request nor a pending migration it is chain.ErrNoMigration.
//
// The request goes first, and the chain is read after: an intent the
// leader records for the request at that moment lands before that read
// (and is cancelled here), or after it, and the leader, which checks that
// the request still stands once its intent is recorded, cancels it
// itself.
func CancelMigrate(ctx context.Context, cli *clientv3.Client, layout cluster.Layout, store *chain.Store, channel string) error {
	l, err := adminLayout(layout)
	if err != nil {
		return err
	}
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return errors.Wrap(err, "coordinator: cancel migration")
	}
	if store == nil {
		return errors.New("coordinator: cancel migration: no chain store")
	}
	key := l.Migrate(channel)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return errors.Wrapf(err, "coordinator: cancel the migration of %s", channel)
	}
	var req cluster.MigrateRequest
	requested := len(resp.Kvs) == 1
	if requested {
		if req, err = cluster.Decode[cluster.MigrateRequest](key, resp.Kvs[0].Value); err != nil {
			return err
		}
	}
	c, found, err := chainOf(ctx, store, channel)
	if err != nil {
		return err
	}
	if err := sealedBy(c, found, req, requested); err != nil {
		return err
	}
	if (!found || c.Pending == nil) && !requested {
		return errors.Wrapf(chain.ErrNoMigration, "coordinator: cancel: no migration of %s is requested or pending", channel)
	}
	if requested {
		if _, err := cli.Delete(ctx, key); err != nil {
			return errors.Wrapf(err, "coordinator: cancel the migration of %s: delete its request", channel)
		}
		if c, found, err = chainOf(ctx, store, channel); err != nil {
			return err
		}
		if err := sealedBy(c, found, req, requested); err != nil {
			return err
		}
	}
	if !found || c.Pending == nil {
		return nil
	}
	_, err = store.CancelMigration(ctx, channel, c.Last().Index, c.Pending.Term)
	switch {
	case err == nil, errors.Is(err, chain.ErrNoMigration):
		return nil
	case errors.Is(err, chain.ErrSegmentMismatch):
		return errmark.Mark(errors.Wrapf(err, "coordinator: cancel the migration of %s: sealed already: migrate back to undo it", channel), ErrMigrationSealed)
	}
	return errors.Wrapf(err, "coordinator: cancel the migration of %s", channel)
}

// chainOf reads channel's chain; found is false when it has none.
func chainOf(ctx context.Context, store *chain.Store, channel string) (c chain.Chain, found bool, err error) {
	c, err = store.Get(ctx, channel)
	switch {
	case err == nil:
		return c, true, nil
	case errors.Is(err, chain.ErrNotFound):
		return c, false, nil
	}
	return c, false, errors.Wrapf(err, "coordinator: cancel the migration of %s", channel)
}

// sealedBy returns ErrMigrationSealed when the migration of req (if
// requested) was sealed in c: nothing pending, the last segment on its
// backend from its term on.
func sealedBy(c chain.Chain, found bool, req cluster.MigrateRequest, requested bool) error {
	last := c.Last()
	if !found || c.Pending != nil || !requested || req.Term == 0 || last.Backend.Name != req.To || last.FirstTerm < req.Term {
		return nil
	}
	return errors.Wrapf(ErrMigrationSealed, "coordinator: the migration of %s to %s was sealed at term %d: it writes on segment %d there; migrate back to undo it",
		c.Channel, req.To, last.FirstTerm, last.Index)
}

func adminLayout(l cluster.Layout) (cluster.Layout, error) {
	out, err := cluster.NewLayout(l.Root)
	return out, errors.Wrap(err, "coordinator")
}
