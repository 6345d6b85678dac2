package coordinator

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/walimpls"
)

// reconcile is one pass of the leader: list the channels, read the
// cluster afresh, decide (with h, what failure detection knows of the
// nodes), and write each change in its own conditional transaction, the
// transactions of a pass at once (each decision guards its own keys, so
// none depends on another's outcome): a move off a dead node takes one
// round trip, however many channels it had. It returns errDeposed if a
// write found the coordinator deposed, else the error of a write whose
// outcome is unknown (the next pass decides again from a fresh read, never
// reapplying it), else errConflict if some writes found their keys
// changed.
func (c *Coordinator) reconcile(ctx context.Context, f fence, h health) error {
	channels, err := c.channels(ctx)
	if err != nil {
		return err
	}
	snap, err := cluster.Load(ctx, c.cli, c.layout, c.log)
	if err != nil {
		return errors.Wrap(err, "coordinator: read cluster")
	}
	now := c.clock.Now()
	assigning, overdue := c.rules.status(snap, channels, now)
	c.metrics.assigning.Set(float64(assigning))
	c.metrics.overdue.Set(float64(len(overdue)))
	c.reportOverdue(snap, overdue)

	migs, err := c.migrations(ctx, f, snap, sortedUnique(channels))
	if err != nil {
		return err
	}
	changes := c.rules.decide(snap, h, channels, migs, now)
	type outcome struct {
		applied bool
		err     error
	}
	outcomes := make([]outcome, len(changes))
	var wg sync.WaitGroup
	limit := make(chan struct{}, maxCommitsInFlight)
	for i, ch := range changes {
		limit <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-limit; wg.Done() }()
			outcomes[i].applied, outcomes[i].err = c.commit(ctx, f, ch)
		}()
	}
	wg.Wait()
	conflicts := 0
	var unknown error
	for _, o := range outcomes {
		switch {
		case errors.Is(o.err, errDeposed):
			return o.err
		case o.err != nil:
			if unknown == nil {
				unknown = o.err
			}
		case !o.applied:
			conflicts++
		}
	}
	if unknown != nil {
		return unknown
	}
	if conflicts > 0 {
		return errors.Wrapf(errConflict, "%d writes", conflicts)
	}
	return nil
}

// maxCommitsInFlight bounds the transactions one pass has in flight.
const maxCommitsInFlight = 16

// channels calls the channel source and keeps the names that can be keys.
func (c *Coordinator) channels(ctx context.Context) ([]string, error) {
	names, err := c.cfg.Channels(ctx)
	if err != nil {
		return nil, errors.Wrap(err, "coordinator: list channels")
	}
	valid := names[:0:0]
	for _, n := range names {
		if err := walimpls.ValidateChannelName(n); err != nil {
			c.log.Warn("channel source listed an invalid channel; ignored", "error", err)
			continue
		}
		valid = append(valid, n)
	}
	return valid, nil
}

// reportOverdue logs, once per channel and term, a channel that has been
// Assigning for longer than OpenTimeout; decide moves it when another live
// node exists, so the log matters when none does.
func (c *Coordinator) reportOverdue(s cluster.Snapshot, overdue []string) {
	seen := make(map[string]bool, len(overdue))
	for _, ch := range overdue {
		seen[ch] = true
		a := s.Assignments[ch].Value
		if c.overdue[ch] == a.Term {
			continue
		}
		c.overdue[ch] = a.Term
		c.log.Warn("channel not opened within the open timeout", "channel", ch, "node", a.Node, "term", a.Term,
			"since", a.Since, "open_error", s.Opened[ch].Value.Error)
	}
	for ch := range c.overdue {
		if !seen[ch] {
			delete(c.overdue, ch)
		}
	}
}

// commit writes one change in one transaction, conditional on the
// coordinator still leading and on every key the decision read being
// unchanged. applied is false when a condition failed (errDeposed if it
// was the leader condition); an error means the outcome is unknown.
func (c *Coordinator) commit(ctx context.Context, f fence, ch change) (applied bool, err error) {
	if c.hooks.beforeCommit != nil {
		if err := c.hooks.beforeCommit(f, ch); err != nil {
			return false, err
		}
	}
	var rev int64
	if c.hooks.afterCommit != nil {
		defer func() { c.hooks.afterCommit(f, ch, rev, applied, err) }()
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(f.key), "=", f.rev)}
	var ops []clientv3.Op
	switch ch.kind {
	case changeAssign, changeConfirm:
		key := c.layout.Assignment(ch.channel)
		if ch.rev == 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.Version(key), "=", 0))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", ch.rev))
		}
		if ch.kind == changeConfirm {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(c.layout.Opened(ch.channel)), "=", ch.openedRev))
		}
		ops = append(ops, clientv3.OpPut(key, string(cluster.Encode(ch.next))))
	}
	for _, g := range ch.guards {
		key := c.layout.Node(g.name)
		if g.kind == guardDrain {
			key = c.layout.Drain(g.name)
		}
		if g.rev == 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.Version(key), "=", 0))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", g.rev))
		}
	}
	if ch.migrateRev != 0 {
		key := c.layout.Migrate(ch.channel)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", ch.migrateRev))
		switch {
		case ch.kind == changeAssign: // the migration's term, for done-detection and walctl
			ops = append(ops, clientv3.OpPut(key, string(cluster.Encode(ch.migrate))))
		case ch.note == "":
			ops = append(ops, clientv3.OpDelete(key))
		default: // say why, for whoever asked (walctl)
			refusal := cluster.MoveRefusal{Request: ch.migrateRev, Reason: ch.note, Kind: cluster.RefusedMigrate}
			ops = append(ops, clientv3.OpDelete(key), clientv3.OpPut(c.layout.Refusal(ch.channel), string(cluster.Encode(refusal))))
		}
	}
	if ch.moveRev != 0 {
		key := c.layout.Move(ch.channel)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", ch.moveRev))
		ops = append(ops, clientv3.OpDelete(key))
		if ch.kind == changeDropMove { // say why, for whoever asked (walctl)
			refusal := cluster.MoveRefusal{Request: ch.moveRev, Reason: ch.note}
			ops = append(ops, clientv3.OpPut(c.layout.Refusal(ch.channel), string(cluster.Encode(refusal))))
		}
	}
	resp, err := c.cli.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(f.key)).Commit()
	if err == nil && c.hooks.loseAnswer != nil && c.hooks.loseAnswer(ch) {
		err = errors.New("test: answer lost")
	}
	if err != nil {
		c.metrics.failed.WithLabelValues("unknown").Inc()
		return false, errors.Wrapf(err, "coordinator: %s %s (outcome unknown)", ch.kind, ch.channel)
	}
	rev = resp.Header.GetRevision()
	if !resp.Succeeded {
		if !stillLeader(resp, f) {
			c.metrics.failed.WithLabelValues("deposed").Inc()
			c.log.Warn("write refused: no longer leader", "channel", ch.channel, "change", ch.kind.String())
			return false, errDeposed
		}
		c.metrics.failed.WithLabelValues("conflict").Inc()
		c.log.Debug("write refused: changed since read", "channel", ch.channel, "change", ch.kind.String())
		return false, nil
	}
	c.logApplied(ch)
	return true, nil
}

// stillLeader reads the Else branch of a failed commit: the election key
// as it is now.
func stillLeader(resp *clientv3.TxnResponse, f fence) bool {
	if len(resp.Responses) == 0 {
		return false
	}
	r := resp.Responses[0].GetResponseRange()
	return r != nil && len(r.Kvs) == 1 && r.Kvs[0].CreateRevision == f.rev
}

func (c *Coordinator) logApplied(ch change) {
	switch ch.kind {
	case changeAssign:
		c.metrics.moves.WithLabelValues(string(ch.reason)).Inc()
		from := ch.next.Since // the pass's start
		if ch.reason == reasonOwnerDead || ch.reason == reasonOwnerSilent {
			from = ch.detected
		}
		c.metrics.decide.WithLabelValues(string(ch.reason)).Observe(c.clock.Since(from).Seconds())
		attrs := []any{"channel", ch.channel, "node", ch.next.Node, "term", ch.next.Term, "reason", string(ch.reason)}
		if ch.rev != 0 {
			attrs = append(attrs, "from", ch.prev.Node, "from_term", ch.prev.Term)
		}
		if ch.migrateRev != 0 {
			attrs = append(attrs, "migrate_to", ch.migrate.To)
		}
		c.log.Info("channel assigned", attrs...)
	case changeConfirm:
		c.log.Debug("channel open confirmed", "channel", ch.channel, "node", ch.next.Node, "term", ch.next.Term)
	case changeDropMove:
		c.log.Warn("move request dropped", "channel", ch.channel, "why", ch.note)
	case changeDropMigrate:
		if ch.note == "" {
			c.metrics.migrations.WithLabelValues("finished").Inc()
			c.log.Info("migration done: the chain ends on its backend; request deleted", "channel", ch.channel, "to", ch.migrate.To,
				"term", ch.migrate.Term, "by", ch.migrate.By)
			return
		}
		c.metrics.migrations.WithLabelValues("refused").Inc()
		c.log.Warn("migrate request refused", "channel", ch.channel, "to", ch.migrate.To, "by", ch.migrate.By, "why", ch.note)
	}
}
