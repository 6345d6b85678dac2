package kafka

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"math"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/streamwal/streamwal/walimpls/internal/claimown"
)

// Partitions of a channel topic.
const (
	logPartition   int32 = 0 // the WAL's messages
	claimPartition int32 = 1 // term claims
)

// A claim record (partition 1, produced without a transaction):
//
//	key:   "streamwal.claim"
//	value: "swc1" | term int64 big-endian | nonce [16]byte   (28 bytes)
var (
	claimKey   = []byte("streamwal.claim")
	claimMagic = []byte("swc1")
)

const claimLen = 4 + 8 + 16

type nonce [16]byte

// The deletion marker is the claim Opener.Delete writes before it fences the
// channel's producers: the highest term there is, with a nonce no open
// draws (a random nonce equals it with probability 2^-128). It wins over
// every other claim, the same-term claim of an open written after it
// included, so that nothing acquires the channel once it is written. A node
// that does not know the marker still sees a claim of a term above its own.
var deletionNonce = nonce([]byte("streamwal-delete"))

const deletionTerm = math.MaxInt64

func newNonce() nonce {
	var n nonce
	_, _ = rand.Read(n[:]) // crypto/rand.Read never fails
	return n
}

// claim is one decoded claim record.
type claim struct {
	term   int64
	nonce  nonce
	offset int64
}

// owner is c as the winner rule (claimown.Claim.Beats) sees it.
func (c claim) owner() claimown.Claim[nonce] {
	return claimown.Claim[nonce]{Term: c.term, Nonce: c.nonce, Deletion: c.isDeletion()}
}

func encodeClaim(term int64, n nonce) []byte {
	b := make([]byte, 0, claimLen)
	b = append(b, claimMagic...)
	b = binary.BigEndian.AppendUint64(b, uint64(term))
	return append(b, n[:]...)
}

func decodeClaim(r *kgo.Record) (claim, bool) {
	v := r.Value
	if !bytes.Equal(r.Key, claimKey) || len(v) != claimLen || !bytes.Equal(v[:4], claimMagic) {
		return claim{}, false
	}
	c := claim{term: int64(binary.BigEndian.Uint64(v[4:12])), offset: r.Offset}
	copy(c.nonce[:], v[12:])
	return c, c.term >= 0
}

// isDeletion reports whether c is the deletion marker.
func (c claim) isDeletion() bool { return c.term == deletionTerm && c.nonce == deletionNonce }

// claims is every claim still in a channel's claim partition.
type claims []claim

// deleting reports whether the deletion marker is among the claims: the
// topic is being deleted.
func (cs claims) deleting() bool {
	for _, c := range cs {
		if c.isDeletion() {
			return true
		}
	}
	return false
}

// maxTerm is the highest term claimed, -1 when there is no claim.
func (cs claims) maxTerm() int64 {
	m := int64(-1)
	for _, c := range cs {
		m = max(m, c.term)
	}
	return m
}

// winner is the claim that owns the channel (claimown.Claim.Beats): the
// deletion marker if there is one, else the highest term, and among claims
// of that term the last one written. cs is in offset order.
func (cs claims) winner() (claim, bool) {
	var w claim
	found := false
	for _, c := range cs {
		if !found || c.owner().Beats(w.owner()) {
			w, found = c, true
		}
	}
	return w, found
}

// writeClaim appends a claim and returns its offset.
func (o *Opener) writeClaim(ctx context.Context, topic string, term int64, n nonce) (int64, error) {
	r := &kgo.Record{Topic: topic, Partition: claimPartition, Key: claimKey, Value: encodeClaim(term, n)}
	got, err := o.admin.ProduceSync(ctx, r).First()
	if err != nil {
		return 0, errors.Wrapf(err, "kafka: write term claim to %q", topic)
	}
	return got.Offset, nil
}

// readClaims reads the whole claim partition of topic, up to its end at the
// time of the call. id is the topic's ID when the caller learnt it (zero
// when unknown): a failed read asks the cluster whether the topic still
// exists under that ID, and fails with errTopicGone when it does not,
// instead of retrying until ctx ends.
func (o *Opener) readClaims(ctx context.Context, topic string, id topicID) (claims, error) {
	var out claims
	gone := func(err error) error {
		if g, gerr := o.topicGone(ctx, topic, id); gerr == nil && g {
			return errPermanent{errTopicGone}
		}
		return err
	}
	err := retry(ctx, func() error {
		out = out[:0]
		start, end, err := o.bounds(ctx, topic, claimPartition, false)
		if err != nil {
			return gone(err)
		}
		for next := start; next < end; {
			fp, after, err := o.fetchRaw(ctx, topic, claimPartition, next, 1<<20, false)
			if err != nil {
				return gone(err)
			}
			for _, r := range fp.Records {
				if c, ok := decodeClaim(r); ok {
					out = append(out, c)
				} else {
					o.log.Warn("ignoring a foreign record in the claim partition", "topic", topic, "offset", r.Offset)
				}
			}
			if after <= next {
				return errRetry
			}
			next = after
		}
		return o.sameTopic(ctx, topic, id)
	})
	if err != nil {
		return nil, errors.Wrapf(err, "kafka: read term claims of %q", topic)
	}
	return out, nil
}

// sameTopic checks, in the client's metadata cache (no request when it is
// fresh), that topic still has the ID id: list offsets name the topic, and
// would read a topic created again after a Delete as if it were the old
// one. The cache may still hold the old ID for up to MetadataMinAge; a
// read it misses finds the claims of the new topic, where this writer's
// claim is not, so the writer is fenced all the same.
func (o *Opener) sameTopic(ctx context.Context, topic string, id topicID) error {
	if id == (topicID{}) {
		return nil
	}
	md, err := o.adm.Metadata(ctx, topic)
	if err != nil {
		return err
	}
	if td, ok := md.Topics[topic]; ok && td.Err == nil && topicID(td.ID) != (topicID{}) && topicID(td.ID) != id {
		return errPermanent{errTopicGone}
	}
	return nil
}

// dropClaimsBefore deletes the claims before off (best effort: they are
// only kept small, never needed once a later claim wins).
func (o *Opener) dropClaimsBefore(ctx context.Context, topic string, off int64) {
	if off <= 0 {
		return
	}
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: topic, Partition: claimPartition, At: off})
	if _, err := o.adm.DeleteRecords(ctx, os); err != nil {
		o.log.Debug("dropping old term claims", "topic", topic, "err", err)
	}
}

// bounds returns the log start offset and the end of a partition: its high
// watermark, or its last stable offset when committed is set.
func (o *Opener) bounds(ctx context.Context, topic string, part int32, committed bool) (start, end int64, err error) {
	return listBounds(ctx, o.adm, topic, part, committed)
}

func listBounds(ctx context.Context, adm *kadm.Client, topic string, part int32, committed bool) (start, end int64, err error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, 0, err
	}
	var ends kadm.ListedOffsets
	if committed {
		ends, err = adm.ListCommittedOffsets(ctx, topic)
	} else {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, 0, err
	}
	s, ok1 := starts.Lookup(topic, part)
	e, ok2 := ends.Lookup(topic, part)
	if !ok1 || !ok2 {
		return 0, 0, errors.Newf("kafka: no offsets for %s/%d", topic, part)
	}
	return s.Offset, e.Offset, nil
}

// fetchRaw issues one Fetch for a partition at offset to its leader and
// returns the decoded records and the offset to fetch next.
func (o *Opener) fetchRaw(ctx context.Context, topic string, part int32, offset int64, maxBytes int32, committed bool) (kgo.FetchPartition, int64, error) {
	return fetchRaw(ctx, o.admin, o.adm, topic, part, offset, maxBytes, committed)
}

// fetchRaw is Opener.fetchRaw over the given client (adm wraps cl), so that
// a scanner fetches over connections it owns.
func fetchRaw(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic string, part int32, offset int64, maxBytes int32, committed bool) (kgo.FetchPartition, int64, error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return kgo.FetchPartition{}, 0, err
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return kgo.FetchPartition{}, 0, errors.Wrapf(errorOr(td.Err), "kafka: metadata of %q", topic)
	}
	pd, ok := td.Partitions[part]
	if !ok || pd.Err != nil || pd.Leader < 0 {
		return kgo.FetchPartition{}, 0, errors.Wrapf(errorOr(pd.Err), "kafka: no leader for %s/%d", topic, part)
	}
	b := cl.Broker(int(pd.Leader))
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = maxBytes
	req.SessionEpoch = -1
	if committed {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.TopicID = td.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = part
	rp.FetchOffset = offset
	rp.PartitionMaxBytes = maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := b.Request(ctx, req)
	if err != nil {
		return kgo.FetchPartition{}, 0, err
	}
	resp, ok := kresp.(*kmsg.FetchResponse)
	if !ok {
		return kgo.FetchPartition{}, 0, errors.Newf("kafka: unexpected fetch response %T", kresp)
	}
	if resp.ErrorCode != 0 {
		return kgo.FetchPartition{}, 0, kerrFor(resp.ErrorCode)
	}
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			p := &resp.Topics[i].Partitions[j]
			if p.Partition != part {
				continue
			}
			iso := kgo.ReadUncommitted()
			if committed {
				iso = kgo.ReadCommitted()
			}
			fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
				Offset: offset, IsolationLevel: iso, Topic: topic, Partition: part,
			}, p, kgo.DefaultDecompressor(), nil)
			if fp.Err != nil {
				return fp, next, fp.Err
			}
			return fp, next, nil
		}
	}
	return kgo.FetchPartition{}, 0, errors.Newf("kafka: fetch response without %s/%d", topic, part)
}
