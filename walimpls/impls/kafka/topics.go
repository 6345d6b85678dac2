package kafka

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicID is a topic's Kafka ID. A topic deleted and created again under the
// same name gets a new one. Brokers before Kafka 2.8 answer the zero ID.
type topicID [16]byte

// errTopicGone says a channel's topic no longer exists, or exists under
// another ID: the channel was deleted (and maybe created again).
var errTopicGone = errors.New("the channel's topic was deleted")

// topicMeta is what one broker's metadata says about one topic.
type topicMeta struct {
	exists bool
	err    error // the topic's error, other than unknown topic
	id     topicID
	parts  map[int32]partMeta
}

type partMeta struct {
	leader int32
	err    error
}

// metadataRequest asks for topic alone, never creating it.
func metadataRequest(topic string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	return req
}

// parseTopicMeta reads topic out of a metadata response.
func parseTopicMeta(resp *kmsg.MetadataResponse, topic string) topicMeta {
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		err := kerr.ErrorForCode(t.ErrorCode)
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return topicMeta{}
		}
		m := topicMeta{exists: true, err: err, id: t.TopicID, parts: make(map[int32]partMeta, len(t.Partitions))}
		for _, p := range t.Partitions {
			m.parts[p.Partition] = partMeta{leader: p.Leader, err: kerr.ErrorForCode(p.ErrorCode)}
		}
		return m
	}
	return topicMeta{}
}

// freshTopic asks the cluster (not franz-go's metadata cache, which may
// be up to MetadataMinAge old) about topic. franz-go stores the answer in
// its cache, so that the admin calls that resolve partition leaders from
// the cache (list offsets, delete records, fetchRaw) see it too.
func (o *Opener) freshTopic(ctx context.Context, topic string) (topicMeta, error) {
	resp, err := metadataRequest(topic).RequestWith(ctx, o.admin)
	if err != nil {
		return topicMeta{}, err
	}
	return parseTopicMeta(resp, topic), nil
}

// topicGone reports whether topic no longer exists, or exists under an ID
// other than id (when both are known).
func (o *Opener) topicGone(ctx context.Context, topic string, id topicID) (bool, error) {
	return topicGone(ctx, o.admin, topic, id)
}

// topicGone is Opener.topicGone over the given client.
func topicGone(ctx context.Context, cl *kgo.Client, topic string, id topicID) (bool, error) {
	resp, err := metadataRequest(topic).RequestWith(ctx, cl)
	if err != nil {
		return false, err
	}
	return !listed(parseTopicMeta(resp, topic), id), nil
}

// isUnknownTopic reports the errors a request for a deleted topic gets.
func isUnknownTopic(err error) bool {
	return errors.IsAny(err, kerr.UnknownTopicOrPartition, kerr.UnknownTopicID)
}

// waitTopicGone waits until no broker's metadata lists topic, so that a
// later open on any node creates a new topic instead of finding the old
// one. A broker that cannot be reached is skipped: nobody gets metadata
// from it either, and an open that does find a dying topic sees the
// deletion marker in its claims and waits too (see Opener.Open).
//
// id is the ID of the dying topic, when known: a topic listed under
// another ID is a new one, created after the deletion (an open on another
// node that saw the deletion first), and counts as gone — waiting for it
// to go would wait for ever.
func (o *Opener) waitTopicGone(ctx context.Context, topic string, id topicID) error {
	err := retry(ctx, func() error {
		resp, err := metadataRequest(topic).RequestWith(ctx, o.admin)
		if err != nil {
			return err
		}
		if listed(parseTopicMeta(resp, topic), id) {
			return errRetry
		}
		for _, b := range resp.Brokers {
			kresp, err := o.admin.Broker(int(b.NodeID)).Request(ctx, metadataRequest(topic))
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				o.log.Debug("waiting for a topic deletion: broker unreachable, skipped", "topic", topic, "broker", b.NodeID, "err", err)
				continue
			}
			resp, ok := kresp.(*kmsg.MetadataResponse)
			if !ok {
				return errors.Newf("kafka: unexpected metadata response %T", kresp)
			}
			if listed(parseTopicMeta(resp, topic), id) {
				return errRetry
			}
		}
		return nil
	})
	if err != nil {
		return errors.Wrapf(err, "kafka: wait for the deletion of topic %q", topic)
	}
	return nil
}

// listed reports whether m lists the topic of ID id (any topic of the name
// when id or m's ID is unknown).
func listed(m topicMeta, id topicID) bool {
	return m.exists && (id == (topicID{}) || m.id == (topicID{}) || m.id == id)
}

// noteTopicID records the ID ensureTopic found topic under. When it
// differs from the one recorded before, the topic was deleted and created
// again since this opener last used it: franz-go's admin client still
// holds the old topic's state (cached metadata with the old ID, the claim
// producer's sequence numbers for its partitions), which must go before
// the new topic is used.
func (o *Opener) noteTopicID(topic string, id topicID) {
	o.idMu.Lock()
	defer o.idMu.Unlock()
	prev, ok := o.topicIDs[topic]
	if ok && prev == id {
		return
	}
	if ok {
		o.log.Info("topic was deleted and created again; forgetting the old one", "topic", topic)
		o.admin.PurgeTopicsFromClient(topic)
	}
	o.topicIDs[topic] = id
}

// forgetTopic drops what the admin client and the opener know of a deleted
// topic.
func (o *Opener) forgetTopic(topic string) {
	o.idMu.Lock()
	defer o.idMu.Unlock()
	delete(o.topicIDs, topic)
	o.admin.PurgeTopicsFromClient(topic)
}
