package chainwal

import (
	"context"
	"slices"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walmanager"
)

// Target returns the backend a migration of channel to the configured
// entry name would write next: the entry's backend, on the channel's
// next segment's name. ErrUnknownBackend when the entry is not configured.
func (o *Opener) Target(c chain.Chain, name string) (chain.Backend, error) {
	var b chain.Backend
	switch {
	case o.cfg.Describe != nil:
		var err error
		if b, err = o.cfg.Describe(name); err != nil {
			return chain.Backend{}, errmark.Mark(errors.Wrapf(err, "chainwal: migrate %s to %q", c.Channel, name), ErrUnknownBackend)
		}
	case name == o.cfg.Default.Name:
		b = o.cfg.Default
	default:
		return chain.Backend{}, errors.Wrapf(ErrUnknownBackend, "chainwal: migrate %s to %q: the configuration names only %q",
			c.Channel, name, o.cfg.Default.Name)
	}
	b.Channel = SegmentChannel(c.Channel, c.Last().Index+1)
	return b, nil
}

// BeginMigration records the intent to move channel's writes to the
// backend entry target at term (step 1): the next open of the channel at
// term or above fences, seals and opens the new segment. The caller took
// term from the channel's term authority. Refusals are chain's
// (ErrMigrationPending, ErrSameBackend, ErrStaleTerm, ...) and
// ErrUnknownBackend. A channel without a chain gets one first, on
// Default.
func (o *Opener) BeginMigration(ctx context.Context, channel, target string, term int64, by string) (chain.Chain, error) {
	c, err := o.cfg.Store.Get(ctx, channel)
	if errors.Is(err, chain.ErrNotFound) {
		b := o.cfg.Default
		b.Channel = channel
		if c, err = o.cfg.Store.Create(ctx, channel, b, 0); errors.Is(err, chain.ErrExists) {
			c, err = o.cfg.Store.Get(ctx, channel)
		}
	}
	if err != nil {
		return chain.Chain{}, errors.Wrapf(err, "chainwal: migrate %s", channel)
	}
	b, err := o.Target(c, target)
	if err != nil {
		return chain.Chain{}, err
	}
	c, err = o.cfg.Store.BeginMigration(ctx, channel, chain.MigrationRequest{Segment: c.Last().Index, Target: b, Term: term, By: by})
	if err != nil {
		return chain.Chain{}, errors.Wrapf(err, "chainwal: migrate %s to %q", channel, target)
	}
	o.log.Info("migration requested", "channel", channel, "to", b.String(), "term", term, "by", by)
	return c, nil
}

// CancelMigration removes channel's pending migration while its segment
// is not sealed yet; after the seal it is chain.ErrSegmentMismatch
// (migrate again to undo it).
func (o *Opener) CancelMigration(ctx context.Context, channel string) (chain.Chain, error) {
	c, err := o.cfg.Store.Get(ctx, channel)
	if err != nil {
		return chain.Chain{}, errors.Wrapf(err, "chainwal: cancel the migration of %s", channel)
	}
	if c.Pending == nil {
		return chain.Chain{}, errors.Wrapf(chain.ErrNoMigration, "chainwal: cancel the migration of %s: none is pending", channel)
	}
	c, err = o.cfg.Store.CancelMigration(ctx, channel, c.Last().Index, c.Pending.Term)
	if err != nil {
		return chain.Chain{}, errors.Wrapf(err, "chainwal: cancel the migration of %s", channel)
	}
	return c, nil
}

// Manager is the part of a walmanager.Manager that Migrate drives: the
// embedded node's term authority.
type Manager interface {
	Open(ctx context.Context, ch adaptor.Channel) error
	Channels() []walmanager.ChannelStatus
}

// Migrate moves channel's writes to the backend entry target on a node
// without a coordinator: it takes the next term from m, records the
// intent, and opens the channel at that term through m, which closes the
// WAL of the old term and fences, seals and opens (see the package
// documentation). It returns the chain as the open left it. The channel
// must be open on m (a WAL of the old term to take over from); a failed
// open leaves the intent, which the next open at or above its term
// finishes, or CancelMigration removes.
func (o *Opener) Migrate(ctx context.Context, m Manager, channel, target, by string) (chain.Chain, error) {
	chs := m.Channels()
	i := slices.IndexFunc(chs, func(s walmanager.ChannelStatus) bool { return s.Name == channel })
	if i < 0 {
		return chain.Chain{}, errors.Wrapf(walimpls.ErrNoChannel, "chainwal: migrate %s: the manager does not hold it (open it first)", channel)
	}
	next := chs[i].Term + 1
	if _, err := o.BeginMigration(ctx, channel, target, next, by); err != nil {
		return chain.Chain{}, err
	}
	if err := m.Open(ctx, adaptor.Channel{Name: channel, Term: next}); err != nil {
		return chain.Chain{}, errors.Wrapf(err, "chainwal: migrate %s to %q: open at term %d (the intent stays: the next open finishes it)", channel, target, next)
	}
	return o.cfg.Store.Get(ctx, channel)
}

// Delete implements walmanager.ChannelDeleter: it deletes every kept
// segment's data on its backend, then the chain. A channel without a chain
// is deleted on Default.
func (o *Opener) Delete(ctx context.Context, channel string) error {
	c, err := o.cfg.Store.Get(ctx, channel)
	if errors.Is(err, chain.ErrNotFound) {
		opener, err := o.cfg.Openers.Opener(chain.Backend{Name: o.cfg.Default.Name, Kind: o.cfg.Default.Kind, Channel: channel, Params: o.cfg.Default.Params})
		if err != nil {
			return errors.Wrapf(err, "chainwal: delete %s", channel)
		}
		return opener.Delete(ctx, channel)
	}
	if err != nil {
		return errors.Wrapf(err, "chainwal: delete %s", channel)
	}
	for _, s := range c.Segments {
		opener, err := o.cfg.Openers.Opener(s.Backend)
		if err != nil {
			return errors.Wrapf(err, "chainwal: delete %s: segment %d", channel, s.Index)
		}
		if err := opener.Delete(ctx, s.Backend.Channel); err != nil && !errors.Is(err, walimpls.ErrNoChannel) {
			return errors.Wrapf(err, "chainwal: delete %s: segment %d on %s", channel, s.Index, s.Backend)
		}
	}
	return o.cfg.Store.Remove(ctx, channel, c.Last().Index)
}

// OffDefault returns the chains whose writable segment is not on the
// default backend entry: channels a configuration change did not move
// (a node never moves a channel because its default changed), for the
// node to report.
func (o *Opener) OffDefault(ctx context.Context) ([]chain.Chain, error) {
	all, err := o.cfg.Store.List(ctx)
	if err != nil {
		return nil, errors.Wrap(err, "chainwal: list chains")
	}
	return slices.DeleteFunc(all, func(c chain.Chain) bool { return c.Last().Backend.Name == o.cfg.Default.Name }), nil
}

// Default returns the backend entry new channels begin on.
func (o *Opener) Default() string { return o.cfg.Default.Name }
