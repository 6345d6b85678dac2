package kafka

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/streamwal/streamwal/walimpls"
)

// Delete implements walimpls.Opener: it finishes this opener's WALs of the
// channel, fences the channel's writers on every node (with transactions),
// deletes the channel's topic and waits until no broker lists it. See the
// package documentation, "Deleting a channel".
func (o *Opener) Delete(ctx context.Context, name string) error {
	if err := walimpls.ValidateChannelName(name); err != nil {
		return err
	}
	if o.isClosed() {
		return errors.Wrapf(walimpls.ErrClosed, "kafka: delete channel %q: opener closed", name)
	}
	if err := ctx.Err(); err != nil {
		return errors.Wrapf(err, "kafka: delete channel %q", name)
	}
	// This opener's WALs first: they stop starting transactions, and an
	// append in flight that the fence below fails reports the deletion.
	for _, w := range o.walsOf(name) {
		w.markDeleted()
	}
	ctx, cancel := context.WithTimeout(ctx, o.cfg.CreateTimeout)
	defer cancel()
	topic := o.cfg.topicName(name)
	if err := o.deleteChannel(ctx, name, topic); err != nil {
		return errors.Wrapf(err, "kafka: delete channel %q", name)
	}
	o.log.Info("deleted channel", "channel", name, "topic", topic)
	return nil
}

// deleteChannel fences the channel's writers, deletes its topic and waits
// for the deletion to show. A topic that does not exist is neither
// fenced nor deleted (nor created).
func (o *Opener) deleteChannel(ctx context.Context, name, topic string) error {
	var (
		exists bool
		id     topicID
	)
	err := retry(ctx, func() error {
		m, err := o.freshTopic(ctx, topic)
		exists, id = m.exists, m.id
		return err
	})
	if err != nil {
		return err
	}
	if exists && !o.cfg.DisableTransactions {
		if err := o.fenceForDelete(ctx, name, topic); err != nil {
			return err
		}
	}
	if exists {
		if err := o.deleteTopic(ctx, topic); err != nil {
			return err
		}
	}
	// Also when it did not exist for us: another node's Delete may have
	// deleted it, with brokers still listing it.
	if err := o.waitTopicGone(ctx, topic, id); err != nil {
		return err
	}
	o.forgetTopic(topic)
	return nil
}

// fenceForDelete stops every writer of the channel, on every node, for
// good. It claims the channel with the deletion marker and then
// initialises the channel's transactional id, as an open claims and then
// owns (see "Fencing" in the package documentation):
//
//   - the producer initialisation bumps the epoch: a producer initialised
//     before it is fenced by the broker, and its open transaction is
//     aborted;
//   - a producer initialised after it passes no claim check: the marker
//     wins over every claim, so the writer closes it unused and is fenced
//     for good; an open fails the same way, or waits for the topic to go.
//
// So no writer commits a transaction after fenceForDelete returns, in this
// topic or, its producers all being fenced, in a topic created later under
// the same name.
func (o *Opener) fenceForDelete(ctx context.Context, name, topic string) error {
	if _, err := o.writeClaim(ctx, topic, deletionTerm, deletionNonce); err != nil {
		if gone, gerr := o.topicGone(ctx, topic, topicID{}); gerr == nil && gone {
			// Deleted under us: by a Delete that fenced before deleting.
			return nil
		}
		return err
	}
	opts := append(o.txnOpts(name), o.cfg.ClientOptions...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return errors.WithStack(fmt.Errorf("kafka: client: %w: %w", err, walimpls.ErrInvalidConfig))
	}
	defer cl.Close()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return errors.Wrap(err, "kafka: fence the channel's producers: init producer id")
	}
	return nil
}

// deleteTopic deletes topic; one that does not exist is deleted.
func (o *Opener) deleteTopic(ctx context.Context, topic string) error {
	err := retry(ctx, func() error {
		resp, err := o.adm.DeleteTopics(ctx, topic)
		if err != nil {
			return err
		}
		r, ok := resp[topic]
		switch {
		case !ok:
			return errors.Newf("kafka: no answer for topic %q", topic)
		case r.Err == nil, errors.Is(r.Err, kerr.UnknownTopicOrPartition):
			return nil
		case isFatalAdminErr(r.Err):
			if r.ErrMessage != "" {
				return errPermanent{errors.Wrap(r.Err, r.ErrMessage)}
			}
			return errPermanent{r.Err}
		}
		return r.Err
	})
	if err != nil {
		return errors.Wrapf(err, "kafka: delete topic %q", topic)
	}
	return nil
}

// walsOf returns this opener's open WALs of channel name.
func (o *Opener) walsOf(name string) []*wal {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ws []*wal
	for w := range o.wals {
		if w.ch.Name == name {
			ws = append(ws, w)
		}
	}
	return ws
}
