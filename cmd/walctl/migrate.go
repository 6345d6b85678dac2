package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/walimpls"
)

// maxRequestsInFlight bounds the migrate requests migrate --all writes at
// once.
const maxRequestsInFlight = 8

// metaPrefix is where walnode keeps the cluster's meta store (the chains
// among it): the root without its slash, plus "-meta/".
func metaPrefix(root string) string { return strings.TrimSuffix(root, "/") + "-meta/" }

// chains returns the chain store of the cluster (made on first use).
func (c *ctl) chains() (*chain.Store, error) {
	if c.chainStore == nil {
		kv, err := etcdstore.New(c.cli, etcdstore.Options{Prefix: metaPrefix(c.layout.Root)})
		if err != nil {
			return nil, errors.Wrap(err, "the cluster's meta store")
		}
		c.closers = append(c.closers, func() { _ = kv.Close() })
		c.chainStore = chain.NewStore(kv, chain.Options{})
	}
	return c.chainStore, nil
}

// migrateArgs checks migrate's arguments against its flags: <channel>
// <backend>, --all <backend>, or -cancel <channel>.
func migrateArgs(o options, args []string) (channel, backend, msg string) {
	switch {
	case o.cancel && (o.all || o.dryRun):
		return "", "", "-cancel takes one channel: not with -all or -dry-run"
	case o.cancel && len(args) != 1:
		return "", "", fmt.Sprintf("-cancel wants <channel>, got %d argument(s)", len(args))
	case o.cancel:
		return args[0], "", ""
	case o.all && len(args) != 1:
		return "", "", fmt.Sprintf("-all wants <backend>, got %d argument(s)", len(args))
	case o.all:
		return "", args[0], ""
	case len(args) != 2:
		return "", "", fmt.Sprintf("wants <channel> <backend> (or -all <backend>, -cancel <channel>), got %d argument(s)", len(args))
	}
	return args[0], args[1], ""
}

// planned is one channel of a migration plan.
type planned struct {
	Channel string `json:"channel"`
	// Backend and Segment are where the channel writes now ("" and -1
	// without a chain).
	Backend string `json:"backend"`
	Segment int64  `json:"segment"`
	To      string `json:"to"`
	// ToChannel is the new segment's channel on To.
	ToChannel string `json:"to_channel,omitempty"`
	Term      int64  `json:"term"`
	NewTerm   int64  `json:"new_term"`
	Owner     string `json:"owner"`
	// NewOwner is who opens the new segment: the owner while it is live
	// and not drained, else the coordinator's choice ("").
	NewOwner string `json:"new_owner,omitempty"`
	// Note says what differs from a plain migration (a pending one, no
	// chain yet).
	Note string `json:"note,omitempty"`
}

// planMigrate returns the plan of migrating channels to backend: each
// channel not on it already, or an error for one that cannot be (only
// when one channel is asked for: with all, those are left out).
func planMigrate(s cluster.Snapshot, chains map[string]chain.Chain, channels []string, backend string, all bool) ([]planned, error) {
	var out []planned
	for _, ch := range channels {
		av, ok := s.Assignments[ch]
		if !ok {
			return nil, errUnknownChannel(ch)
		}
		a := av.Value
		p := planned{Channel: ch, Segment: -1, To: backend, Term: a.Term, NewTerm: a.Term + 1, Owner: a.Node}
		if _, live := s.Nodes[a.Node]; live {
			if _, drained := s.Drains[a.Node]; !drained {
				p.NewOwner = a.Node
			}
		}
		c, found := chains[ch]
		if !found {
			p.Note = "no chain yet: its owner's first open as a chain makes one"
			out = append(out, p)
			continue
		}
		last := c.Last()
		p.Backend, p.Segment = last.Backend.String(), int64(last.Index)
		p.ToChannel = chainwal.SegmentChannel(ch, last.Index+1)
		switch m := c.Pending; {
		case m != nil && m.Target.Name == backend:
			p.NewTerm, p.ToChannel = m.Term, m.Target.Channel
			p.Note = fmt.Sprintf("pending already: requested by %q at %s", m.By, m.At.Format(time.RFC3339))
		case m != nil && all:
			continue
		case m != nil:
			return nil, errors.Newf("another migration of %s (to %s at term %d, requested by %q) is pending: walctl migrate -cancel %s first",
				ch, m.Target.Name, m.Term, m.By, ch)
		case last.Backend.Name == backend && all:
			continue
		case last.Backend.Name == backend:
			return nil, errors.Newf("channel %q is on backend %s already (segment %d, since term %d)", ch, backend, last.Index, last.FirstTerm)
		}
		out = append(out, p)
	}
	return out, nil
}

// printPlan prints a migration plan (-dry-run).
func (c *ctl) printPlan(plan []planned) error {
	if c.json {
		enc := json.NewEncoder(c.out)
		for _, p := range plan {
			if err := enc.Encode(p); err != nil {
				return err
			}
		}
		return nil
	}
	if len(plan) == 0 {
		_, err := fmt.Fprintln(c.out, "nothing to migrate")
		return err
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CHANNEL\tBACKEND\tSEGMENT\tTO\tTERM\tOWNER\tNOTE")
	for _, p := range plan {
		backend, seg, to := "-", "-", p.To
		if p.Segment >= 0 {
			backend, seg = p.Backend, fmt.Sprint(p.Segment)
			to += "/" + p.ToChannel
		}
		owner := p.Owner
		if p.NewOwner == "" {
			owner += " -> (another live node)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d -> %d\t%s\t%s\n", p.Channel, backend, seg, to, p.Term, p.NewTerm, owner, p.Note)
	}
	return w.Flush()
}

// readChains reads the chains of channels: all of them at once when asked
// for many.
func (c *ctl) readChains(ctx context.Context, channels []string) (map[string]chain.Chain, error) {
	store, err := c.chains()
	if err != nil {
		return nil, err
	}
	out := map[string]chain.Chain{}
	if len(channels) == 1 {
		ch, err := store.Get(ctx, channels[0])
		switch {
		case errors.Is(err, chain.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			out[channels[0]] = ch
		}
		return out, nil
	}
	all, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, ch := range all {
		out[ch.Channel] = ch
	}
	return out, nil
}

// migrate runs "walctl migrate".
func (c *ctl) migrate(ctx context.Context, channel, backend string) error {
	if c.opts.cancel {
		return c.cancelMigrate(ctx, channel)
	}
	if err := walimpls.ValidateChannelName(backend); err != nil {
		return errors.Wrap(err, "backend entry name")
	}
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	channels := []string{channel}
	if c.opts.all {
		channels = sortedKeys(s.Assignments)
	} else if err := walimpls.ValidateChannelName(channel); err != nil {
		return err
	}
	chains, err := c.readChains(ctx, channels)
	if err != nil {
		return err
	}
	plan, err := planMigrate(s, chains, channels, backend, c.opts.all)
	if err != nil {
		return err
	}
	// What the coordinator would refuse is refused here, by a dry run too.
	if len(plan) > 0 || c.opts.dryRun {
		if err := c.checkMigrationTarget(ctx, backend); err != nil {
			return err
		}
	}
	if c.opts.dryRun {
		return c.printPlan(plan)
	}
	if len(plan) == 0 {
		if !c.json {
			fmt.Fprintf(c.out, "every channel is on %s already\n", backend)
		}
		return nil
	}
	revs, errs := c.requestMigrations(ctx, plan)
	if c.requested != nil {
		c.requested()
	}
	var (
		sts     []*migState
		refused []string // another migration requested there: nothing written
		unknown bool     // a write whose outcome is unknown
	)
	for i, p := range plan {
		switch err := errs[i]; {
		case err == nil:
			sts = append(sts, &migState{p: p, rev: revs[i]})
		case errors.Is(err, coordinator.ErrMigrateRequested):
			refused = append(refused, fmt.Sprintf("%s: %v", p.Channel, err))
		default:
			unknown = true
		}
	}
	if unknown {
		// Some requests may be written: take them back, so that a migrate
		// that fails never takes effect later.
		all := make([]*migState, len(plan))
		for i, p := range plan {
			all[i] = &migState{p: p, rev: revs[i], writeErr: errs[i]}
		}
		cause := ctx.Err()
		if cause == nil {
			cause = errors.New("a request could not be written")
		}
		return c.giveUp(ctx, all, len(plan), cause)
	}
	return c.awaitMigrations(ctx, sts, refused)
}

// checkMigrationTarget refuses a migration to backend that the leading
// coordinator would refuse, from what it publishes beside its election
// key (cluster.CandidateInfo.Migrations): none runs, it runs without
// chains, or backend is none of its entries. A leader that publishes
// nothing (an older walnode) decides alone: a dry run says so on stderr.
func (c *ctl) checkMigrationTarget(ctx context.Context, backend string) error {
	if err := c.checkCoordinator(ctx); err != nil {
		return err
	}
	m, leader, err := c.leaderMigrations(ctx)
	if err != nil {
		return err
	}
	switch {
	case m == nil:
		if c.opts.dryRun {
			fmt.Fprintf(c.errOut, "walctl: the coordinator %s does not publish its backend entries: it decides on %q itself\n", leader, backend)
		}
		return nil
	case !m.Chains:
		return errors.Newf("this cluster runs without chains: its coordinator %s refuses every migration (a node configuration with several backends runs one)", leader)
	case !slices.Contains(m.Backends, backend):
		return errors.Newf("unknown backend %q: the cluster's backend entries are %s (the coordinator %s's configuration)", backend, strings.Join(m.Backends, ", "), leader)
	}
	return nil
}

// leaderMigrations returns the migrations the leading coordinator carries
// out, as it published them (nil when it does not say), and its ID.
func (c *ctl) leaderMigrations(ctx context.Context) (*cluster.MigrationTargets, string, error) {
	resp, err := c.cli.Get(ctx, c.layout.Election()+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return nil, "", errors.Wrap(err, "look for the coordinator")
	}
	if len(resp.Kvs) == 0 {
		return nil, "", errors.Newf("no coordinator runs for this cluster (no candidate under %s)", c.layout.Election())
	}
	leader := string(resp.Kvs[0].Value)
	key := string(resp.Kvs[0].Key)
	lease, err := strconv.ParseInt(key[strings.LastIndex(key, "/")+1:], 16, 64)
	if err != nil {
		return nil, leader, nil // not a key of this version's election: it says nothing
	}
	infoKey := c.layout.Candidate(lease)
	info, err := c.cli.Get(ctx, infoKey)
	if err != nil {
		return nil, leader, errors.Wrap(err, "read the coordinator's candidate info")
	}
	if len(info.Kvs) == 0 {
		return nil, leader, nil
	}
	ci, err := cluster.Decode[cluster.CandidateInfo](infoKey, info.Kvs[0].Value)
	if err != nil {
		return nil, leader, err
	}
	return ci.Migrations, leader, nil
}

// requestMigrations writes the migrate request of every planned channel,
// a few at a time, and returns their revisions, or the error of each
// that failed.
func (c *ctl) requestMigrations(ctx context.Context, plan []planned) (revs []int64, errs []error) {
	by := "walctl"
	if host, err := os.Hostname(); err == nil {
		by += "@" + host
	}
	revs = make([]int64, len(plan))
	errs = make([]error, len(plan))
	limit := make(chan struct{}, maxRequestsInFlight)
	var wg sync.WaitGroup
	for i, p := range plan {
		limit <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-limit; wg.Done() }()
			revs[i], errs[i] = coordinator.RequestMigrate(ctx, c.cli, c.layout, p.Channel, p.To, by)
		}()
	}
	wg.Wait()
	return revs, errs
}

// migration is what walctl reports of one channel's migration.
type migration struct {
	Channel string `json:"channel"`
	To      string `json:"to"`
	// Result is started (intent recorded and the channel assigned at
	// Term), migrated (the chain ends on To and the owner opened it at
	// Term: -wait) or refused (Reason).
	Result string `json:"result"`
	Term   int64  `json:"term,omitempty"`
	Owner  string `json:"owner,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Done and Of count the migrated channels (-wait).
	Done int `json:"done,omitempty"`
	Of   int `json:"of,omitempty"`
}

// migState is what walctl knows of one channel's migration while it
// waits.
type migState struct {
	p   planned
	rev int64 // the request's revision; 0 when its write failed
	// writeErr is why the request's write failed: another migration
	// requested there (nothing written), or an outcome unknown.
	writeErr error
	started  bool
	// gone: the request was deleted, not refused (done).
	gone     bool
	finished bool
	refused  string
	// last is the chain's last segment once found on To.
	last *chain.Segment
}

// settled reports whether walctl is done with st: finished or refused.
func (st *migState) settled() bool { return st.finished || st.refused != "" }

// awaitMigrations waits for the coordinator's decision on each request of
// sts (the migration started, or refused) and, with -wait, until each
// channel writes on its new segment. The error names the channels refused
// (those refused already, then the coordinator's), with their reasons.
// When walctl stops waiting first (ctx ends, etcd fails), it takes back
// what is not done (giveUp).
func (c *ctl) awaitMigrations(ctx context.Context, sts []*migState, refused []string) error {
	more, err := c.followMigrations(ctx, sts)
	refused = append(refused, more...)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err() // why walctl stops, whatever call it stopped
		}
		var open []*migState
		for _, st := range sts {
			if !st.settled() {
				open = append(open, st)
			}
		}
		err = c.giveUp(ctx, open, len(sts), err)
		if len(refused) > 0 {
			return errors.WithStack(fmt.Errorf("%w\n%w", refusedError(refused), err))
		}
		return err
	}
	if len(refused) > 0 {
		return refusedError(refused)
	}
	return nil
}

// followMigrations follows sts until each is settled, and returns the
// refusals (channel: reason); an error when it stops first.
func (c *ctl) followMigrations(ctx context.Context, sts []*migState) (refused []string, err error) {
	v, err := c.watch(ctx)
	if err != nil {
		return nil, err
	}
	store, err := c.chains()
	if err != nil {
		return nil, err
	}
	done, migrated := 0, 0
	for {
		s, changed := v.Snapshot()
		for _, st := range sts {
			if st.settled() || s.Revision < st.rev {
				continue
			}
			ch := st.p.Channel
			req, there := s.Migrations[ch]
			switch {
			case there && req.Value.Term != 0 && !st.started:
				st.started = true
				a := s.Assignments[ch].Value
				m := migration{Channel: ch, To: st.p.To, Result: "started", Term: req.Value.Term, Owner: a.Node}
				if err := c.report(m, fmt.Sprintf("%s migrates from %s to %s at term %d (owner %s)", ch, orNone(st.p.Backend), st.p.To, m.Term, a.Node)); err != nil {
					return refused, err
				}
			case there:
			case !st.gone:
				why, err := c.migrateRefusal(ctx, ch, st.rev)
				if err != nil {
					return refused, err
				}
				if why != "" {
					st.refused = why
					refused = append(refused, fmt.Sprintf("%s: %s", ch, why))
					m := migration{Channel: ch, To: st.p.To, Result: "refused", Reason: why}
					if c.json {
						if err := c.report(m, ""); err != nil {
							return refused, err
						}
					}
					done++
					continue
				}
				st.gone = true
			}
			if !st.gone {
				if st.started && !c.opts.wait {
					st.finished = true
					done++
				}
				continue
			}
			// The coordinator found the chain on To: with -wait, the owner
			// must also have opened the new segment.
			if st.last == nil {
				cur, err := store.Get(ctx, ch)
				if err != nil {
					return refused, err
				}
				last := cur.Last()
				if last.Backend.Name != st.p.To {
					st.refused = fmt.Sprintf("its request is gone, but the chain ends on %s (cancelled?)", last.Backend)
					refused = append(refused, fmt.Sprintf("%s: %s", ch, st.refused))
					done++
					continue
				}
				st.last = &last
			}
			last := *st.last
			if c.opts.wait && !opened(s, ch, last.FirstTerm) {
				continue
			}
			if !st.started { // it went faster than the view: say so all the same
				st.started = true
				a := s.Assignments[ch].Value
				m := migration{Channel: ch, To: st.p.To, Result: "started", Term: last.FirstTerm, Owner: a.Node}
				if err := c.report(m, fmt.Sprintf("%s migrates from %s to %s at term %d (owner %s)", ch, orNone(st.p.Backend), st.p.To, m.Term, a.Node)); err != nil {
					return refused, err
				}
			}
			st.finished = true
			done++
			if c.opts.wait {
				migrated++
				a := s.Assignments[ch].Value
				m := migration{Channel: ch, To: st.p.To, Result: "migrated", Term: a.Term, Owner: a.Node, Done: migrated, Of: len(sts)}
				if err := c.report(m, fmt.Sprintf("%d/%d migrated: %s writes on %s (segment %d) at term %d on %s",
					migrated, len(sts), ch, last.Backend, last.Index, a.Term, a.Node)); err != nil {
					return refused, err
				}
			}
		}
		if done == len(sts) {
			return refused, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return refused, ctx.Err()
		}
	}
}

func refusedError(refused []string) error {
	slices.Sort(refused)
	return errors.Newf("%d migration(s) refused:\n  %s", len(refused), strings.Join(refused, "\n  "))
}

// migrateRefusal returns the coordinator's reason for refusing the
// migrate request of channel written at rev ("" when it was not refused:
// it is done). The coordinator may have rewritten the request (its Term),
// so any refusal of a migrate request of the channel from rev on is its.
func (c *ctl) migrateRefusal(ctx context.Context, channel string, rev int64) (string, error) {
	resp, err := c.cli.Get(ctx, c.layout.Refusal(channel))
	if err != nil {
		return "", errors.Wrapf(err, "read the decision on migrating %s", channel)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	r, err := cluster.Decode[cluster.MoveRefusal](string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	if err != nil || r.Kind != cluster.RefusedMigrate || r.Request < rev {
		return "", err
	}
	return r.Reason, nil
}

// errPending marks the error of a migrate that gave up while a migration
// may still take effect (exit status 3): walctl could not take it back.
var errPending = errors.New("walctl: pending: may still take effect")
