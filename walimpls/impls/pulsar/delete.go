package pulsar

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// Delete implements walimpls.Opener: it fences every writer of the
// channel for good, then deletes the channel's log and meta topics through
// Config.DeleteTopic (or AdminURL). The steps, and why they are safe, are
// in the package documentation ("Deleting a channel").
func (o *Opener) Delete(ctx context.Context, name string) error {
	if err := walimpls.ValidateChannelName(name); err != nil {
		return err
	}
	if o.isClosed() {
		return errors.Wrapf(walimpls.ErrClosed, "pulsar: delete channel %q: opener closed", name)
	}
	if o.cfg.DeleteTopic == nil {
		return errors.Wrapf(walimpls.ErrInvalidConfig,
			"pulsar: delete channel %q: no way to delete topics: set adminUrl (Config.AdminURL) or Config.DeleteTopic", name)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	topic, meta := o.cfg.topicName(name), o.cfg.metaTopicName(name)
	log := o.log.With("channel", name)

	// 1. This opener's WALs of the channel: finished, their readers closed.
	o.finishDeleted(name)

	// 2. What exists. Without TopicExists, assume both do.
	metaExists, logExists := true, true
	if exists := o.cfg.TopicExists; exists != nil {
		var err error
		if metaExists, err = exists(ctx, meta); err != nil {
			return errors.Wrapf(err, "pulsar: delete channel %q", name)
		}
		if logExists, err = exists(ctx, topic); err != nil {
			return errors.Wrapf(err, "pulsar: delete channel %q", name)
		}
	}
	if !metaExists && !logExists {
		return nil
	}
	deleteMeta := metaExists
	log.Info("deleting the channel")

	// 3. The deletion record: every meta watcher finishes its WAL, and
	// every claim check fails from now on.
	if metaExists {
		switch err := o.writeMeta(ctx, meta, deletionRecord()); {
		case isTopicNotFound(err):
			metaExists = false // deleted meanwhile, and not created again
		case err != nil:
			return errors.Wrapf(err, "pulsar: delete channel %q: deletion record", name)
		}
	}
	if h := o.hooks.afterDeletionRecord; h != nil {
		h(ctx, name)
	}

	// 4. The log topic's exclusive access: its owner has released it or
	// was unloaded, and a producer of it that comes back is refused.
	if metaExists && logExists {
		release, err := o.fenceLog(ctx, name, topic)
		switch {
		case err != nil:
			return err
		case release == nil:
			// Deleted while this call waited for it (by a concurrent
			// Delete, which held it), or gone with auto-creation off:
			// nothing is left to fence or to delete.
			logExists = false
		default:
			defer release()
		}
	}
	if h := o.hooks.beforeDeleteTopics; h != nil {
		h(ctx, name)
	}

	// 5. The topics, the meta topic last: until it goes, the deletion
	// record keeps the channel fenced, whatever happens to this call. A
	// topic TopicExists did not find is left alone.
	for _, t := range []struct {
		name   string
		exists bool
	}{{topic, logExists}, {meta, deleteMeta}} {
		if !t.exists {
			continue
		}
		if err := o.cfg.DeleteTopic(ctx, t.name); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errors.Wrapf(err, "pulsar: delete channel %q: delete topic %s", name, t.name)
		}
	}
	log.Info("deleted the channel")
	return nil
}

// finishDeleted finishes this opener's WALs of the channel name and stops
// their meta watchers (see wal.finishDeleted).
func (o *Opener) finishDeleted(name string) {
	o.mu.Lock()
	var ws []*wal
	for w := range o.wals {
		if w.ch.Name == name {
			ws = append(ws, w)
		}
	}
	o.mu.Unlock()
	for _, w := range ws {
		w.finishDeleted()
		if w.watch != nil {
			w.watch.stop()
		}
	}
}

// fenceLog acquires the log topic exclusively, as an open does (calling
// Config.TakeOver while the owner holds it): the grant bumped the topic
// epoch, so the previous owner's producer, whether it closed itself (its
// meta watcher saw the deletion record) or was unloaded, is refused if it
// comes back while the topic exists. After an unload, the topic is kept
// for Config.TakeOverGrace, so that a live owner's client, which
// reconnects at once, comes back to the topic and is refused instead of
// finding it gone (see the package documentation). A topic that is gone
// (auto-creation off) needs nothing.
//
// The producer holds the topic until release: while it does, the forced
// delete refuses the producers still waiting for the topic instead of
// granting them access a moment before it closes them (pulsar-client-go
// v0.19.0 races when a producer is closed while its creation finishes).
// It never reconnects, so the delete that closes it does not make it
// create the topic again. A nil release and error: the topic is gone, as
// the broker said when it refused the producer (TopicNotFound); only the
// Delete that held the topic deletes it, so no delete closes a producer
// another Delete is being granted.
func (o *Opener) fenceLog(ctx context.Context, name, topic string) (release func(), err error) {
	noReconnect := uint(0)
	cl, p, tookOver, err := o.acquireExclusive(ctx, exclusiveReq{
		topic: topic,
		what:  fmt.Sprintf("delete channel %q", name),
		opts:  pulsar.ProducerOptions{SendTimeout: -1, MaxReconnectToBroker: &noReconnect},
		takeOver: func(ctx context.Context) error {
			o.log.Info("deleting: taking the topic over", "channel", name, "topic", topic)
			if err := o.cfg.TakeOver(ctx, topic); err != nil {
				o.log.Warn("take-over hook failed", "channel", name, "topic", topic, "err", err)
			}
			return nil
		},
	})
	release = func() {
		if p != nil {
			p.Close()
			cl.Close()
		}
	}
	switch {
	case ctx.Err() != nil:
		release()
		return nil, ctx.Err()
	case isTopicNotFound(err):
		return nil, nil
	case err != nil:
		return nil, errors.Wrapf(err, "pulsar: delete channel %q", name)
	}
	if tookOver {
		settle := time.NewTimer(o.cfg.TakeOverGrace)
		defer settle.Stop()
		select {
		case <-settle.C:
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
	}
	return release, nil
}
