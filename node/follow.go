package node

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/walmanager"
)

// follow owns held: on every change of the cluster it opens the channels
// assigned to this node at their terms and removes the ones assigned
// elsewhere (or no more), each in a goroutine of its own, since an open
// can take a while and the manager orders requests per channel itself.
func (n *Node) follow() {
	defer n.wg.Done()
	for {
		snap, changed := n.view.Snapshot()
		want := map[string]cluster.Versioned[cluster.Assignment]{}
		for ch, a := range snap.Assignments {
			if a.Value.Node == n.cfg.ID {
				want[ch] = a
			}
		}
		seen := time.Now()
		for ch, a := range want {
			if n.held[ch] != a.Value.Term {
				n.held[ch] = a.Value.Term
				n.startOpen(ch, a.Value.Term, a.Revision, seen)
			}
		}
		for ch, term := range n.held {
			if _, ok := want[ch]; !ok {
				delete(n.held, ch)
				n.startRemove(ch, term)
			}
		}
		select {
		case <-changed:
		case <-n.ctx.Done():
			return
		}
	}
}

// startOpen opens ch at term and reports the outcome under the node's
// lease, unless a newer request overtook it. The report is written only if
// the assignment is still the one acted on (revision rev): a late report of
// an old owner never overwrites the new owner's. A successful report
// carries the open's times (phases.go) from seen, when the follower saw
// the assignment.
func (n *Node) startOpen(ch string, term, rev int64, seen time.Time) {
	done := n.beginOpen(ch, term)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		err := n.mgr.Open(n.ctx, walmanager.Channel{Name: ch, Term: term})
		n.endOpen(ch, done)
		switch {
		case n.ctx.Err() != nil:
			return
		case errors.IsAny(err, walmanager.ErrSuperseded, walmanager.ErrStaleTerm):
			return // the assignment moved on; the follower acts on it
		case err != nil:
			n.metrics.opens.WithLabelValues("failed").Inc()
			n.log.Warn("channel open failed", "channel", ch, "term", term, "error", err)
		default:
			n.metrics.opens.WithLabelValues("ok").Inc()
			n.log.Info("channel open", "channel", ch, "term", term)
		}
		report := cluster.Opened{Channel: ch, Node: n.cfg.ID, Term: term}
		if err != nil {
			report.Error = err.Error()
		} else if t, ok := n.openTimes(ch, term); ok {
			n.phases.opened(seen, t)
			report.Seen, report.Fenced, report.Ready = seen, t.Fenced, t.Ready
		}
		n.writeReport(ch, rev, report)
	}()
}

// openTimes returns the times of the open of ch at term, which its WAL
// carries; false when the WAL is no longer available at term (fenced or
// removed since the open returned).
func (n *Node) openTimes(ch string, term int64) (adaptor.OpenTimes, bool) {
	w, err := n.mgr.GetAvailableWAL(walmanager.Channel{Name: ch, Term: term})
	if err != nil {
		return adaptor.OpenTimes{}, false
	}
	return adaptor.OpenTimesOf(w)
}

// writtenReport is an open report as written, for the assignment revision
// rev.
type writtenReport struct {
	rev    int64
	report cluster.Opened
}

// writeReport writes an open report under the node's lease, while the
// assignment is still at rev. A write that fails (the lease expired under
// it, etcd unreachable) is tried again, with the session keepSession
// registers next: without the report the coordinator would wait for its
// open timeout, and then, with no other node to go to, forever.
func (n *Node) writeReport(ch string, rev int64, report cluster.Opened) {
	term := report.Term
	retry := backoff.Config{Initial: 50 * time.Millisecond, Max: time.Second}
	for attempt := 0; ; attempt++ {
		sess := n.session()
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.SessionTTL)
		resp, err := n.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(n.layout.Assignment(ch)), "=", rev)).
			Then(clientv3.OpPut(n.layout.Opened(ch), string(cluster.Encode(report)), clientv3.WithLease(sess.Lease()))).
			Commit()
		cancel()
		switch {
		case n.ctx.Err() != nil:
			return
		case err == nil && !resp.Succeeded:
			n.log.Debug("open report dropped: the assignment moved on", "channel", ch, "term", term)
			n.reportMu.Lock()
			if r, ok := n.reports[ch]; ok && r.rev == rev {
				delete(n.reports, ch)
			}
			n.reportMu.Unlock()
			return
		case err == nil:
			n.reportMu.Lock()
			if r, ok := n.reports[ch]; !ok || r.rev <= rev {
				n.reports[ch] = writtenReport{rev: rev, report: report}
			}
			n.reportMu.Unlock()
			return
		}
		n.log.Warn("open report not written; trying again", "channel", ch, "term", term, "attempt", attempt+1, "error", err)
		if retry.Wait(n.ctx, attempt) != nil {
			return
		}
	}
}

// openInFlight is an open of startOpen: its term, and a channel closed
// when it ends.
type openInFlight struct {
	term int64
	done chan struct{}
}

// beginOpen notes the open of ch at term.
func (n *Node) beginOpen(ch string, term int64) chan struct{} {
	done := make(chan struct{})
	n.openMu.Lock()
	n.opening[ch] = openInFlight{term: term, done: done}
	n.openMu.Unlock()
	return done
}

// endOpen notes the end of the open whose channel is done; a later open
// of ch (a newer term) keeps its entry.
func (n *Node) endOpen(ch string, done chan struct{}) {
	n.openMu.Lock()
	if n.opening[ch].done == done {
		delete(n.opening, ch)
	}
	n.openMu.Unlock()
	close(done)
}

// openEnded returns a channel closed when the open of ch at term in
// flight ends, or nil when none is.
func (n *Node) openEnded(ch string, term int64) <-chan struct{} {
	n.openMu.Lock()
	defer n.openMu.Unlock()
	if o, ok := n.opening[ch]; ok && o.term == term {
		return o.done
	}
	return nil
}

// startRemove closes ch at term (and anything older).
func (n *Node) startRemove(ch string, term int64) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		err := n.mgr.Remove(n.ctx, walmanager.Channel{Name: ch, Term: term})
		if err != nil && n.ctx.Err() == nil && !errors.Is(err, walmanager.ErrStaleTerm) {
			n.log.Warn("channel remove failed", "channel", ch, "term", term, "error", err)
			return
		}
		n.log.Info("channel removed", "channel", ch, "term", term)
	}()
}
