package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/walimpls"
)

// What became of a migration walctl gave up on (migration.Result).
const (
	// gaveUpWithdrawn: its request, withdrawn before the coordinator acted
	// on it. Nothing changes.
	gaveUpWithdrawn = "withdrawn"
	// gaveUpCancelled: the intent the coordinator recorded, cancelled
	// before its seal. The channel stays on its backend.
	gaveUpCancelled = "cancelled"
	// gaveUpRefused: the coordinator refused it meanwhile.
	gaveUpRefused = "refused"
	// gaveUpPending: sealed already (the channel writes on the new
	// backend), or not taken back (etcd failed): it may still take effect.
	gaveUpPending = "pending"
)

// gaveUp is what became of one migration walctl gave up on.
type gaveUp struct {
	st     *migState
	result string
	// detail says what happened, and for a pending one the command that
	// cancels or undoes it.
	detail string
}

// giveUp takes back the migrations of sts that walctl stops waiting for
// (cause: why it stops), so that a migrate reported as failed never takes
// effect later, and returns the error that says what became of each. Its
// exit status is 1, or 3 (errPending) when one may still take effect.
// total is the number of channels the command asked for.
func (c *ctl) giveUp(ctx context.Context, sts []*migState, total int, cause error) error {
	if len(sts) == 0 {
		return cause
	}
	outs := make([]gaveUp, len(sts))
	limit := make(chan struct{}, maxRequestsInFlight)
	var wg sync.WaitGroup
	for i, st := range sts {
		if errors.Is(st.writeErr, coordinator.ErrMigrateRequested) {
			// Another migration is requested there: walctl wrote nothing.
			outs[i] = gaveUp{st: st, result: gaveUpRefused, detail: st.writeErr.Error()}
			continue
		}
		limit <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-limit; wg.Done() }()
			outs[i] = c.abandon(ctx, st)
			if st.writeErr != nil {
				outs[i].detail = fmt.Sprintf("writing its request failed (%v), and may have been applied: %s", st.writeErr, outs[i].detail)
			}
		}()
	}
	wg.Wait()
	var lines []string
	pending := 0
	for _, g := range outs {
		ch := g.st.p.Channel
		if g.result == gaveUpPending {
			pending++
		}
		if c.json {
			m := migration{Channel: ch, To: g.st.p.To, Result: g.result, Reason: g.detail}
			if err := c.report(m, ""); err != nil {
				return err
			}
		}
		line := fmt.Sprintf("%s: %s", ch, g.detail)
		if g.result == gaveUpPending {
			line = "PENDING " + line
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	what := "taken back: none takes effect"
	if pending > 0 {
		what = fmt.Sprintf("%d pending, not taken back: it may still take effect, or did", pending)
	}
	err := fmt.Errorf("%d of %d migration(s) not done (%w); %s:\n  %s", len(sts), total, cause, what, strings.Join(lines, "\n  "))
	if pending > 0 {
		return errmark.Mark(errors.WithStack(err), errPending)
	}
	return errors.WithStack(err)
}

// abandon takes back the migration of st that walctl gives up on: its
// request, if the coordinator has not acted on it (a delete conditional
// on the revision walctl wrote, as move withdraws its request), then the
// intent the coordinator recorded, before its seal (as migrate -cancel
// does: the intent the leader records meanwhile is cancelled here, or by
// the leader, which finds the request gone). Sealed already, or etcd
// failing, it is pending, with the command that undoes or cancels it.
func (c *ctl) abandon(ctx context.Context, st *migState) gaveUp {
	ch, to := st.p.Channel, st.p.To
	g := gaveUp{st: st}
	pending := func(detail string) gaveUp { g.result, g.detail = gaveUpPending, detail; return g }
	cancelCmd := "walctl migrate -cancel " + ch
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	withdrawn := false
	if st.rev != 0 {
		key := c.layout.Migrate(ch)
		resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", st.rev)).Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return pending(fmt.Sprintf("its request could not be withdrawn (%v) and may still be acted on: %s withdraws it", err, cancelCmd))
		}
		withdrawn = resp.Succeeded
	}
	store, err := c.chains()
	if err != nil {
		return pending(fmt.Sprintf("its migration could not be cancelled (%v): %s cancels it before its seal", err, cancelCmd))
	}
	before, err := store.Get(ctx, ch)
	if err != nil && !errors.Is(err, chain.ErrNotFound) {
		return pending(fmt.Sprintf("its chain could not be read (%v): %s cancels its migration before its seal", err, cancelCmd))
	}
	err = coordinator.CancelMigrate(ctx, c.cli, c.layout, store, ch)
	switch {
	case errors.Is(err, coordinator.ErrMigrationSealed):
		return pending(c.sealedDetail(ctx, store, st.p))
	case err != nil && !errors.Is(err, chain.ErrNoMigration):
		return pending(fmt.Sprintf("its migration could not be cancelled (%v): %s cancels it before its seal", err, cancelCmd))
	}
	// Nothing is requested or pending any more. Sealed, though, before the
	// cancel came (by an owner that opened at the intent's term), it took
	// effect: that is the chain's to say.
	cur, gerr := store.Get(ctx, ch)
	if gerr != nil && !errors.Is(gerr, chain.ErrNotFound) {
		return pending(fmt.Sprintf("its chain could not be read (%v): walctl channels -v shows whether it was sealed; %s cancels a migration before its seal", gerr, cancelCmd))
	}
	if last := cur.Last(); gerr == nil && cur.Pending == nil && last.Backend.Name == to && int64(last.Index) > st.p.Segment {
		return pending(c.sealedDetail(ctx, store, st.p))
	}
	switch {
	case err == nil && before.Pending != nil:
		p := before.Pending
		g.result, g.detail = gaveUpCancelled, fmt.Sprintf("the migration to %s at term %d cancelled before its seal: it stays on %s", p.Target.Name, p.Term, before.Last().Backend)
		return g
	case err == nil, withdrawn:
		g.result, g.detail = gaveUpWithdrawn, "its request withdrawn before the coordinator acted on it: nothing changes"
		return g
	}
	// Gone before walctl looked: refused, or cancelled by someone else.
	if st.rev != 0 {
		why, err := c.migrateRefusal(ctx, ch, st.rev)
		if err != nil {
			return pending(fmt.Sprintf("what became of its request could not be read (%v): walctl channels -v shows its chain; %s cancels a migration before its seal", err, cancelCmd))
		}
		if why != "" {
			g.result, g.detail = gaveUpRefused, "the coordinator refused it: "+why
			return g
		}
	}
	g.result, g.detail = gaveUpWithdrawn, "no request or migration of it is left: nothing changes"
	return g
}

// sealedDetail says that the migration of p was sealed, and how to undo
// it: migrate back.
func (c *ctl) sealedDetail(ctx context.Context, store *chain.Store, p planned) string {
	where, serving, undo := p.To, "", fmt.Sprintf("walctl migrate %s <its former backend> undoes it", p.Channel)
	if cur, err := store.Get(ctx, p.Channel); err == nil {
		last := cur.Last()
		where = fmt.Sprintf("%s (segment %d) from term %d", last.Backend, last.Index, last.FirstTerm)
		if n := len(cur.Segments); n >= 2 {
			undo = fmt.Sprintf("walctl migrate %s %s undoes it", p.Channel, cur.Segments[n-2].Backend.Name)
		}
		if s, err := c.snapshot(ctx); err == nil && !opened(s, p.Channel, last.FirstTerm) {
			serving = " (not served yet: " + notServing(s, p.Channel, last.FirstTerm) + ")"
		}
	}
	return fmt.Sprintf("sealed already: it writes on %s%s; %s", where, serving, undo)
}

// cancelMigrate runs "walctl migrate -cancel <channel>".
func (c *ctl) cancelMigrate(ctx context.Context, channel string) error {
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return err
	}
	store, err := c.chains()
	if err != nil {
		return err
	}
	before, err := store.Get(ctx, channel)
	if err != nil && !errors.Is(err, chain.ErrNotFound) {
		return err
	}
	if err := coordinator.CancelMigrate(ctx, c.cli, c.layout, store, channel); err != nil {
		return err
	}
	what := fmt.Sprintf("the migrate request of %s withdrawn before its intent", channel)
	if p := before.Pending; p != nil {
		what = fmt.Sprintf("the migration of %s to %s at term %d cancelled: it stays on %s", channel, p.Target.Name, p.Term, before.Last().Backend)
	}
	return c.report(map[string]string{"channel": channel, "result": "cancelled"}, what)
}

func orNone(s string) string {
	if s == "" {
		return "its backend"
	}
	return s
}
