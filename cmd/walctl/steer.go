package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/walimpls"
)

// withdrawTimeout bounds withdrawing a request nobody acted on.
const withdrawTimeout = 5 * time.Second

// checkMove refuses a move the cluster's state already rules out.
func checkMove(s cluster.Snapshot, channel, to string) error {
	av, ok := s.Assignments[channel]
	if !ok {
		return errUnknownChannel(channel)
	}
	a := av.Value
	if to == "" {
		if others := liveNodes(s, a.Node); len(others) == 0 {
			return errors.Newf("nowhere to move %q: no live, undrained node other than its owner %s (walctl nodes lists the nodes)", channel, a.Node)
		}
		return nil
	}
	if err := checkTarget(s, to); err != nil {
		return err
	}
	if to == a.Node {
		return errors.Newf("channel %q is already on node %s (term %d)", channel, to, a.Term)
	}
	return nil
}

// checkTarget refuses a node that cannot take a channel.
func checkTarget(s cluster.Snapshot, node string) error {
	if err := cluster.ValidateNodeID(node); err != nil {
		return err
	}
	if _, registered := s.Nodes[node]; !registered {
		if len(channelsOf(s, node)) > 0 {
			return errors.Newf("node %s is not live: its lease is gone (walctl nodes lists the live nodes)", node)
		}
		return errors.Newf("unknown node %q (walctl nodes lists the nodes)", node)
	}
	if d, drained := s.Drains[node]; drained {
		return errors.Newf("node %s is drained since %s (walctl undrain %s lets it take channels again)", node, d.Value.Since.Format(time.RFC3339), node)
	}
	return nil
}

// checkCoordinator refuses a request no coordinator would act on.
func (c *ctl) checkCoordinator(ctx context.Context) error {
	resp, err := c.cli.Get(ctx, strings.TrimSuffix(c.layout.Election(), "/"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return errors.Wrap(err, "look for a coordinator")
	}
	if resp.Count == 0 {
		return errors.Newf("no coordinator runs for this cluster (no candidate under %s): nothing would act on the request (each walnode runs one unless -coordinator=false)", c.layout.Election())
	}
	return nil
}

// moved is the coordinator's decision on a move request it honoured.
type moved struct {
	Channel string `json:"channel"`
	From    string `json:"from"`
	To      string `json:"to"`
	Term    int64  `json:"term"`
	// Serving is set once the new owner serves the channel (-wait).
	Serving bool `json:"serving"`
}

func (c *ctl) move(ctx context.Context, channel, to string) error {
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return err
	}
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	if err := checkMove(s, channel, to); err != nil {
		return err
	}
	if err := c.checkCoordinator(ctx); err != nil {
		return err
	}
	m, err := c.requestMove(ctx, channel, to)
	if err != nil {
		return err
	}
	if err := c.report(m, fmt.Sprintf("%s moves from %s to %s at term %d", m.Channel, m.From, m.To, m.Term)); err != nil {
		return err
	}
	if !c.opts.wait {
		return nil
	}
	return c.awaitServing(ctx, []moved{m})
}

// requestMove writes a move request and waits for the coordinator's
// decision: the move it made, or its refusal as an error. A request no
// coordinator acted on before ctx ends is withdrawn.
func (c *ctl) requestMove(ctx context.Context, channel, to string) (moved, error) {
	key := c.layout.Move(channel)
	put, err := c.cli.Put(ctx, key, string(cluster.Encode(cluster.MoveRequest{To: to})))
	if err != nil {
		return moved{}, errors.Wrapf(err, "request move of %s", channel)
	}
	rev := put.Header.Revision
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range c.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return moved{}, errors.Wrapf(err, "watch the move request of %s", channel)
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				return moved{}, errors.Newf("the move request of %s was replaced by another before the coordinator acted on it", channel)
			}
			return c.decision(ctx, channel, rev, ev.Kv.ModRevision)
		}
	}
	// Nobody acted: take the request back, unless it went meanwhile.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer wcancel()
	_, werr := c.cli.Txn(wctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	what := "withdrawn"
	if werr != nil {
		what = "it could not be withdrawn (" + werr.Error() + ") and may still be acted on"
	}
	return moved{}, errors.Wrapf(ctx.Err(), "the coordinator did not act on the move request of %s in time; %s", channel, what)
}

// decision reads what the coordinator did with the move request of
// channel written at reqRev and deleted at delRev: the refusal it recorded
// in the same transaction, or the assignment it wrote.
func (c *ctl) decision(ctx context.Context, channel string, reqRev, delRev int64) (moved, error) {
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(c.layout.Refusal(channel), clientv3.WithRev(delRev)),
		clientv3.OpGet(c.layout.Assignment(channel), clientv3.WithRev(delRev)),
		clientv3.OpGet(c.layout.Assignment(channel), clientv3.WithRev(reqRev)),
	).Commit()
	if err != nil {
		return moved{}, errors.Wrapf(err, "read the decision on moving %s", channel)
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 && kvs[0].ModRevision == delRev {
		r, err := cluster.Decode[cluster.MoveRefusal](string(kvs[0].Key), kvs[0].Value)
		if err == nil && r.Request == reqRev {
			return moved{}, errors.Newf("the coordinator refused to move %s: %s", channel, r.Reason)
		}
	}
	after := resp.Responses[1].GetResponseRange().GetKvs()
	if len(after) != 1 || after[0].ModRevision != delRev {
		return moved{}, errors.Newf("the move request of %s was deleted before the coordinator acted on it", channel)
	}
	a, err := cluster.Decode[cluster.Assignment](string(after[0].Key), after[0].Value)
	if err != nil {
		return moved{}, err
	}
	m := moved{Channel: channel, To: a.Node, Term: a.Term}
	if before := resp.Responses[2].GetResponseRange().GetKvs(); len(before) == 1 {
		if b, err := cluster.Decode[cluster.Assignment](string(before[0].Key), before[0].Value); err == nil {
			m.From = b.Node
		}
	}
	return m, nil
}

// report prints a steering command's outcome.
func (c *ctl) report(v any, text string) error {
	if c.json {
		return json.NewEncoder(c.out).Encode(v)
	}
	_, err := fmt.Fprintln(c.out, text)
	return err
}

// watch returns the view that follows the cluster while a command waits.
func (c *ctl) watch(ctx context.Context) (*cluster.View, error) {
	if c.view == nil {
		v, err := cluster.Watch(ctx, c.cli, c.layout, nil)
		if err != nil {
			return nil, err
		}
		c.view = v
	}
	return c.view, nil
}

// awaitServing waits until each moved channel is served by its owner (the
// one it moved to, or a later one if it moved on): the owner reported it
// open at its term without error and its Status lists it available. When
// ctx ends first, the error says why each channel still waits.
func (c *ctl) awaitServing(ctx context.Context, ms []moved) error {
	v, err := c.watch(ctx)
	if err != nil {
		return err
	}
	retry := backoff.Config{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	for _, m := range ms {
		for attempt := 0; ; attempt++ {
			s, err := v.WaitFor(ctx, func(s cluster.Snapshot) bool { return opened(s, m.Channel, m.Term) })
			if err != nil {
				return errors.Wrapf(err, "%s is not served yet: %s", m.Channel, notServing(s, m.Channel, m.Term))
			}
			a, n, _ := s.Owner(m.Channel)
			if c.availableOn(ctx, n.Addr, m.Channel, a.Term) {
				m.To, m.Term, m.Serving = a.Node, a.Term, true
				if err := c.report(m, fmt.Sprintf("%s is served by %s at term %d", m.Channel, a.Node, a.Term)); err != nil {
					return err
				}
				break
			}
			if err := retry.Wait(ctx, attempt); err != nil {
				return errors.Wrapf(err, "%s is not served yet: %s does not list it available at term %d", m.Channel, a.Node, a.Term)
			}
		}
	}
	return nil
}

// opened reports whether channel's owner, at a term of at least term, is
// live and reported it open at its term without error.
func opened(s cluster.Snapshot, channel string, term int64) bool {
	a, _, live := s.Owner(channel)
	if !live || a.Term < term {
		return false
	}
	o, ok := s.Opened[channel]
	return ok && o.Value.Node == a.Node && o.Value.Term == a.Term && o.Value.Error == ""
}

// notServing says why channel is not served at term (or later) in s.
func notServing(s cluster.Snapshot, channel string, term int64) string {
	av, ok := s.Assignments[channel]
	if !ok {
		return "it has no assignment"
	}
	a := av.Value
	_, live := s.Nodes[a.Node]
	o := s.Opened[channel].Value
	switch {
	case !live:
		return fmt.Sprintf("its owner %s is not live", a.Node)
	case a.Term < term:
		return fmt.Sprintf("still at term %d on %s", a.Term, a.Node)
	case o.Node == a.Node && o.Term == a.Term && o.Error != "":
		return fmt.Sprintf("%s fails to open it at term %d: %s", a.Node, a.Term, o.Error)
	}
	return fmt.Sprintf("%s is opening it at term %d since %s", a.Node, a.Term, a.Since.Format(time.RFC3339))
}

// availableOn reports whether the node at addr lists channel available at
// term.
func (c *ctl) availableOn(ctx context.Context, addr, channel string, term int64) bool {
	st, err := c.status(ctx, addr)
	if err != nil {
		return false
	}
	for _, cs := range st.GetChannels() {
		if cs.GetName() == channel && cs.GetTerm() == term && cs.GetState() == "available" {
			return true
		}
	}
	return false
}

// checkDrain refuses a drain the cluster's state rules out; already says
// the node is drained already.
func checkDrain(s cluster.Snapshot, node string) (already bool, err error) {
	if err := cluster.ValidateNodeID(node); err != nil {
		return false, err
	}
	_, registered := s.Nodes[node]
	owned := channelsOf(s, node)
	if !registered && len(owned) == 0 {
		return false, errors.Newf("unknown node %q (walctl nodes lists the nodes)", node)
	}
	if _, drained := s.Drains[node]; drained {
		return true, nil
	}
	if len(owned) > 0 && len(liveNodes(s, node)) == 0 {
		return false, errors.Newf("cannot drain %s: no other live, undrained node could take its %d channel(s) (%s)",
			node, len(owned), strings.Join(owned, ", "))
	}
	return false, nil
}

func (c *ctl) drain(ctx context.Context, node string) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	already, err := checkDrain(s, node)
	if err != nil {
		return err
	}
	owned := channelsOf(s, node)
	if already && len(owned) > 0 && len(liveNodes(s, node)) == 0 {
		return errors.Newf("%s is drained already, but its %d channel(s) (%s) have nowhere to go: no other live, undrained node",
			node, len(owned), strings.Join(owned, ", "))
	}
	if len(owned) > 0 {
		if err := c.checkCoordinator(ctx); err != nil {
			return err
		}
	}
	if err := coordinator.RequestDrain(ctx, c.cli, c.layout, node); err != nil {
		return err
	}
	what := fmt.Sprintf("drain of %s requested: %d channel(s) to move", node, len(owned))
	if already {
		what = fmt.Sprintf("%s was drained already since %s: %d channel(s) still on it", node, s.Drains[node].Value.Since.Format(time.RFC3339), len(owned))
	}
	if err := c.report(map[string]any{"node": node, "result": "drained", "already": already, "channels": owned}, what); err != nil {
		return err
	}
	if len(owned) == 0 {
		return nil
	}
	// Wait until every channel left the node: the coordinator's decisions.
	v, err := c.watch(ctx)
	if err != nil {
		return err
	}
	s, err = v.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(channelsOf(s, node)) == 0 })
	if err != nil {
		left := channelsOf(s, node)
		why := "the coordinator has not moved them"
		if len(liveNodes(s, node)) == 0 {
			why = "no other live, undrained node can take them"
		}
		return errors.Wrapf(err, "%s is drained (it takes no new channels), but %d channel(s) are still on it (%s): %s",
			node, len(left), strings.Join(left, ", "), why)
	}
	var ms []moved
	for _, ch := range owned {
		if a, ok := s.Assignments[ch]; ok {
			m := moved{Channel: ch, From: node, To: a.Value.Node, Term: a.Value.Term}
			ms = append(ms, m)
			if err := c.report(m, fmt.Sprintf("%s moves from %s to %s at term %d", ch, node, m.To, m.Term)); err != nil {
				return err
			}
		}
	}
	if !c.opts.wait {
		return nil
	}
	return c.awaitServing(ctx, ms)
}

func (c *ctl) undrain(ctx context.Context, node string) error {
	if err := cluster.ValidateNodeID(node); err != nil {
		return err
	}
	resp, err := c.cli.Get(ctx, c.layout.Drain(node), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if resp.Count == 0 {
		return errors.Newf("node %q is not drained (walctl nodes shows which are)", node)
	}
	if err := coordinator.Undrain(ctx, c.cli, c.layout, node); err != nil {
		return err
	}
	return c.report(map[string]string{"node": node, "result": "undrained"}, "undrained "+node)
}

// rebalance requests the moves that bring the live, undrained nodes'
// channel counts within one of each other: each from a most loaded node to
// a least loaded one (every move is a planned move: term + 1), one after
// the other's decision.
func (c *ctl) rebalance(ctx context.Context) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	moves := planRebalance(s)
	if len(moves) == 0 {
		if !c.json {
			fmt.Fprintln(c.out, "balanced")
		}
		return nil
	}
	if err := c.checkCoordinator(ctx); err != nil {
		return err
	}
	var done []moved
	for _, pm := range moves {
		m, err := c.requestMove(ctx, pm.channel, pm.to)
		if err != nil {
			return err
		}
		done = append(done, m)
		if err := c.report(m, fmt.Sprintf("%s moves from %s to %s at term %d", m.Channel, m.From, m.To, m.Term)); err != nil {
			return err
		}
	}
	if !c.opts.wait {
		return nil
	}
	return c.awaitServing(ctx, done)
}

type plannedMove struct{ channel, from, to string }

// planRebalance moves channels from the most to the least loaded live,
// undrained node until their counts differ by at most one; ties by ID.
func planRebalance(s cluster.Snapshot) []plannedMove {
	owned := map[string][]string{}
	var nodes []string
	for id := range s.Nodes {
		if _, drained := s.Drains[id]; !drained {
			nodes = append(nodes, id)
			owned[id] = nil
		}
	}
	if len(nodes) < 2 {
		return nil
	}
	for _, ch := range sortedKeys(s.Assignments) {
		if a := s.Assignments[ch].Value; owned[a.Node] != nil || slices.Contains(nodes, a.Node) {
			owned[a.Node] = append(owned[a.Node], ch)
		}
	}
	slices.Sort(nodes)
	var moves []plannedMove
	for {
		most, least := nodes[0], nodes[0]
		for _, id := range nodes {
			if len(owned[id]) > len(owned[most]) {
				most = id
			}
			if len(owned[id]) < len(owned[least]) {
				least = id
			}
		}
		if len(owned[most])-len(owned[least]) <= 1 {
			return moves
		}
		ch := owned[most][len(owned[most])-1]
		owned[most] = owned[most][:len(owned[most])-1]
		owned[least] = append(owned[least], ch)
		moves = append(moves, plannedMove{channel: ch, from: most, to: least})
	}
}
