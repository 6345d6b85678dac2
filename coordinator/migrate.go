package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cluster"
)

// noChains is the refusal of every migrate request of a coordinator
// without Config.Chains.
const noChains = "this cluster runs without chains: its coordinator has no chain store (a node configuration with several backends runs one)"

// migrations is the chain step of a pass, before decide: for the migrate
// request of every managed channel in s, it reads the channel's chain
// (after s was read, which planMigration relies on), plans with
// planMigration, and does the chain's part: records an intent
// (BeginMigration) or cancels a stray one. It returns what decide needs.
// Only the leader changes a chain: it checks that it still leads before
// each change and after an intent (errDeposed otherwise; the intent a
// deposed leader may leave is handled by the rules). An error reading a
// chain fails the pass: decide never assigns a channel with a migrate
// request without knowing its chain; a chain that changed between its
// read and the intent's write fails it too (errConflict: the next pass,
// soon, plans from a fresh read).
func (c *Coordinator) migrations(ctx context.Context, f fence, s cluster.Snapshot, channels []string) (map[string]migration, error) {
	var todo []string
	for ch := range s.Migrations {
		if _, ok := slices.BinarySearch(channels, ch); ok {
			todo = append(todo, ch)
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	slices.Sort(todo)
	out := make(map[string]migration, len(todo))
	if c.cfg.Chains == nil {
		for _, ch := range todo {
			out[ch] = migration{refusal: noChains}
		}
		return out, nil
	}
	// Many requests (walctl migrate -all): one read of every chain
	// rather than one each.
	var chains map[string]chain.Chain
	if len(todo) > maxCommitsInFlight {
		all, err := c.cfg.Chains.List(ctx)
		if err != nil {
			return nil, errors.Wrap(err, "coordinator: migrate: read the chains")
		}
		chains = make(map[string]chain.Chain, len(all))
		for _, ch := range all {
			chains[ch.Channel] = ch
		}
	}
	results := make([]migration, len(todo))
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	limit := make(chan struct{}, maxCommitsInFlight)
	for i, ch := range todo {
		limit <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-limit; wg.Done() }()
			cur, found := chains[ch]
			if chains == nil {
				var err error
				cur, err = c.cfg.Chains.Get(ctx, ch)
				if found = err == nil; err != nil && !errors.Is(err, chain.ErrNotFound) {
					errs[i] = errors.Wrapf(err, "coordinator: migrate %s: read its chain", ch)
					return
				}
			}
			results[i], errs[i] = c.migration(ctx, f, s, ch, cur, found)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if errors.Is(err, errDeposed) {
			return nil, err
		}
	}
	for i, ch := range todo {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out[ch] = results[i]
	}
	return out, nil
}

// migration does the chain step for one channel's migrate request, its
// chain cur (found false: none) read after s.
func (c *Coordinator) migration(ctx context.Context, f fence, s cluster.Snapshot, ch string, cur chain.Chain, found bool) (migration, error) {
	req := s.Migrations[ch].Value
	a, assigned := s.Assignments[ch]
	step := planMigration(req, a.Value, assigned, cur, found)
	log := c.log.With("channel", ch, "to", req.To, "by", req.By)
	switch step.kind {
	case stepWait:
		log.Debug("migration waits", "chain", found, "term", a.Value.Term, "state", a.Value.State)
		return migration{}, nil
	case stepDone:
		return migration{done: true}, nil
	case stepRefuse:
		return migration{refusal: step.note}, nil
	case stepDrive:
		log.Info("migration pending: assigning the channel at its term", "term", step.term, "assigned_term", a.Value.Term)
		return migration{term: step.term}, nil
	case stepCancel:
		if err := c.stillLeading(ctx, f); err != nil {
			return migration{}, err
		}
		p := cur.Pending
		_, err := c.cfg.Chains.CancelMigration(ctx, ch, step.segment, step.term)
		switch {
		case errors.IsAny(err, chain.ErrNoMigration, chain.ErrMigrationMismatch, chain.ErrSegmentMismatch):
			log.Debug("unsealed migration changed before its cancel", "error", err)
			return migration{}, errors.WithStack(fmt.Errorf("migrate %s: %w: %w", ch, err, errConflict))
		case err != nil:
			return migration{}, errors.Wrapf(err, "coordinator: migrate %s: cancel the %s", ch, *p)
		}
		c.metrics.migrations.WithLabelValues("cancelled").Inc()
		if step.note != "" {
			log.Warn("migration cancelled: its owner opened the channel at its term without sealing", "pending_term", p.Term,
				"owner", a.Value.Node, "term", a.Value.Term)
			return migration{refusal: step.note}, nil
		}
		log.Warn("stray migration cancelled: the channel's owner opened it at or above the intent's term without sealing (the intent came later, from a deposed leader); the request is planned again",
			"pending_to", p.Target.String(), "pending_term", p.Term, "owner", a.Value.Node, "term", a.Value.Term)
		return migration{}, nil
	}
	return c.begin(ctx, f, ch, s.Migrations[ch].Revision, req, cur, step)
}

// begin records the intent of step (stepBegin) in ch's chain cur, for the
// request req at revision reqRev, and returns the migration decide
// drives, or the chain's refusal.
func (c *Coordinator) begin(ctx context.Context, f fence, ch string, reqRev int64, req cluster.MigrateRequest, cur chain.Chain, step migrateStep) (migration, error) {
	target, err := c.cfg.Describe(req.To)
	if err != nil {
		return migration{refusal: fmt.Sprintf("backend %q: %v", req.To, err)}, nil
	}
	target.Channel = chainwal.SegmentChannel(ch, step.segment+1)
	if err := c.stillLeading(ctx, f); err != nil {
		return migration{}, err
	}
	if c.hooks.beforeIntent != nil {
		c.hooks.beforeIntent(f, ch, step.term)
	}
	_, err = c.cfg.Chains.BeginMigration(ctx, ch, chain.MigrationRequest{Segment: step.segment, Target: target, Term: step.term, By: req.By})
	switch {
	case errors.IsAny(err, chain.ErrMigrationPending, chain.ErrSegmentMismatch, chain.ErrNotFound):
		// The chain changed since it was read: plan again next pass.
		c.log.Debug("chain changed before the intent", "channel", ch, "error", err)
		return migration{}, errors.WithStack(fmt.Errorf("migrate %s: %w: %w", ch, err, errConflict))
	case errors.IsAny(err, chain.ErrSameBackend, chain.ErrStaleTerm, chain.ErrInvalid):
		return migration{refusal: err.Error()}, nil
	case err != nil:
		return migration{}, errors.Wrapf(err, "coordinator: migrate %s: record the intent (outcome unknown)", ch)
	}
	// The intent is recorded only while this coordinator leads (a deposed
	// leader's is finished, or cancelled by the rules: planMigration) and
	// while its request stands: one withdrawn meanwhile (CancelMigrate
	// deletes the request, then cancels what its chain has pending) takes
	// the intent with it, here or there, whichever comes second.
	leading, standing, err := c.afterIntent(ctx, f, ch, reqRev)
	switch {
	case err != nil:
		return migration{}, err
	case !leading:
		c.metrics.failed.WithLabelValues("deposed").Inc()
		c.log.Warn("intent recorded, but this coordinator no longer leads: left to the leader", "channel", ch, "term", step.term)
		return migration{}, errDeposed
	case !standing:
		_, err := c.cfg.Chains.CancelMigration(ctx, ch, step.segment, step.term)
		if err != nil && !errors.IsAny(err, chain.ErrNoMigration, chain.ErrMigrationMismatch) {
			return migration{}, errors.Wrapf(err, "coordinator: migrate %s: cancel the intent of a withdrawn request", ch)
		}
		c.log.Info("migrate request withdrawn while its intent was recorded: intent cancelled", "channel", ch, "term", step.term)
		return migration{}, errors.Wrapf(errConflict, "migrate %s: the request changed", ch)
	}
	c.metrics.migrations.WithLabelValues("started").Inc()
	c.log.Info("migration started: intent recorded", "channel", ch, "from", cur.Last().Backend.String(), "to", target.String(),
		"segment", step.segment, "term", step.term, "by", req.By)
	return migration{term: step.term}, nil
}

// afterIntent reads, at one revision, whether the election key of f is
// still this coordinator's and the migrate request of ch still the one at
// reqRev.
func (c *Coordinator) afterIntent(ctx context.Context, f fence, ch string, reqRev int64) (leading, standing bool, err error) {
	resp, err := c.cli.Txn(ctx).Then(clientv3.OpGet(f.key), clientv3.OpGet(c.layout.Migrate(ch))).Commit()
	if err != nil {
		return false, false, errors.Wrapf(err, "coordinator: migrate %s: check the election key and the request after the intent (it stays: the next pass plans with it)", ch)
	}
	key := resp.Responses[0].GetResponseRange().GetKvs()
	req := resp.Responses[1].GetResponseRange().GetKvs()
	leading = len(key) == 1 && key[0].CreateRevision == f.rev
	standing = len(req) == 1 && req[0].ModRevision == reqRev
	return leading, standing, nil
}

// stillLeading returns errDeposed unless the election key of f is still
// this coordinator's.
func (c *Coordinator) stillLeading(ctx context.Context, f fence) error {
	resp, err := c.cli.Get(ctx, f.key)
	if err != nil {
		return errors.Wrap(err, "coordinator: check election key")
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != f.rev {
		c.metrics.failed.WithLabelValues("deposed").Inc()
		return errDeposed
	}
	return nil
}
