package pulsar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/walimpls/internal/claimown"
)

// A channel's meta topic (topic name + "=meta") holds three kinds of
// records, each an empty payload with properties:
//
//	term claim   {"k": "claim", "term": "<decimal>", "nonce": "<32 hex>"}
//	truncation   {"k": "trunc", "id": "<marshalled msgID>"}
//	deletion     {"k": "claim", "term": "9223372036854775807",
//	              "nonce": "<32 hex>", "deleted": "1"}
//
// The state of a channel is the fold of every record: the highest term
// claimed (the winner is the last claim of that term) and the highest
// truncation point. A deletion (Opener.Delete) is a claim of the highest
// term there is, marked: nothing after it counts, so no claim beats it,
// and a version of this backend that does not know the mark still sees a
// claim that beats every writer. The topic keeps its records through a
// durable subscription that is never acknowledged.
const (
	metaKind      = "k"
	metaClaim     = "claim"
	metaTrunc     = "trunc"
	metaTerm      = "term"
	metaNonce     = "nonce"
	metaTruncID   = "id"
	metaDeleted   = "deleted"
	metaReadTries = 5
)

// deletionRecord is the meta record of a channel's deletion.
func deletionRecord() map[string]string {
	return map[string]string{
		metaKind: metaClaim, metaTerm: strconvI(math.MaxInt64), metaNonce: newNonce(), metaDeleted: "1",
	}
}

// metaState is the fold of a meta topic.
type metaState struct {
	maxTerm     int64 // -1 when nobody claimed
	winnerNonce string
	// deleted is set by a deletion record; the fold ignores every claim
	// after it.
	deleted  bool
	trunc    msgID
	hasTrunc bool
	// last is the last record folded, valid if hasLast: a watcher started
	// right after it misses nothing the fold did not see.
	last    msgID
	hasLast bool
	// mine is the nonce of the claim the fold looks for; mineSeen is set
	// when it went by.
	mine     string
	mineSeen bool
}

func (st *metaState) apply(props map[string]string) {
	switch props[metaKind] {
	case metaClaim:
		if st.mine != "" && props[metaNonce] == st.mine {
			st.mineSeen = true
		}
		term, err := strconv.ParseInt(props[metaTerm], 10, 64)
		if err != nil || term < 0 {
			return
		}
		c := claimown.Claim[string]{Term: term, Nonce: props[metaNonce], Deletion: props[metaDeleted] != ""}
		if c.Deletion {
			c.Term = math.MaxInt64
		}
		// The winner so far; maxTerm -1 is no claim (claimown.NoClaim).
		w := claimown.Claim[string]{Term: st.maxTerm, Nonce: st.winnerNonce, Deletion: st.deleted}
		if c.Beats(w) {
			st.maxTerm, st.winnerNonce, st.deleted = c.Term, c.Nonce, c.Deletion
		}
	case metaTrunc:
		id, err := parseID(props[metaTruncID])
		if err != nil {
			return
		}
		if !st.hasTrunc || st.trunc.compare(id) < 0 {
			st.trunc, st.hasTrunc = id, true
		}
	}
}

func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// errMetaGap asks readMeta for another attempt: the reader skipped a
// record (it reconnected with a backlog, see the package documentation).
var errMetaGap = errors.New("pulsar: meta topic read skipped a record")

// readMeta folds the whole meta topic, up to its last record at the time of
// the call, looking for the claim with nonce mine ("" for none).
func (o *Opener) readMeta(ctx context.Context, topic, mine string) (metaState, error) {
	for try := 1; ; try++ {
		st, err := o.readMetaOnce(ctx, topic, mine)
		if err == nil || !errors.Is(err, errMetaGap) || try == metaReadTries {
			if err != nil {
				if ctx.Err() != nil {
					return metaState{}, ctx.Err()
				}
				return metaState{}, errors.Wrapf(err, "pulsar: read %s", topic)
			}
			return st, nil
		}
		o.log.Debug("re-reading meta topic", "topic", topic, "err", err)
	}
}

func (o *Opener) readMetaOnce(ctx context.Context, topic, mine string) (metaState, error) {
	st := metaState{maxTerm: -1, mine: mine}
	r, err := o.client.CreateReader(pulsar.ReaderOptions{
		Topic:                   topic,
		StartMessageID:          pulsar.EarliestMessageID(),
		StartMessageIDInclusive: true,
	})
	if err != nil {
		return st, err
	}
	defer r.Close()
	lastP, err := r.GetLastMessageID()
	if err != nil {
		return st, err
	}
	last := fromPulsar(lastP)
	if last.entry < 0 {
		return st, nil // empty
	}
	var prev *msgID
	for {
		m, err := r.Next(ctx)
		if err != nil {
			return st, err
		}
		id := fromPulsar(m.ID())
		switch {
		case prev == nil && (id.entry != 0 || id.batch > 0):
			// The meta topic is never trimmed and has one ledger per
			// load: its first record is entry 0 of a ledger.
			return st, errMetaGap
		case prev != nil && !follows(*prev, id):
			return st, errMetaGap
		}
		prev = &id
		st.apply(m.Properties())
		st.last, st.hasLast = id, true
		if id.compare(msgID{ledger: last.ledger, entry: last.entry, batch: last.batch, partition: id.partition}) >= 0 {
			return st, nil
		}
	}
}

// writeMeta appends one record to a meta topic with a short-lived producer
// of the shared client. The producer has no send timeout (the context
// bounds the write), so nothing of it outlives Close.
func (o *Opener) writeMeta(ctx context.Context, topic string, props map[string]string) error {
	p, err := o.client.CreateProducer(pulsar.ProducerOptions{
		Topic:       topic,
		SendTimeout: -1,
	})
	if err != nil {
		return errors.Wrapf(err, "pulsar: producer for %s", topic)
	}
	defer p.Close()
	done := make(chan error, 1)
	p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte{}, Properties: props},
		func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- err })
	if err := p.FlushWithCtx(ctx); err != nil {
		return errors.Wrapf(err, "pulsar: write %s", topic)
	}
	select {
	case err := <-done:
		if err != nil {
			return errors.Wrapf(err, "pulsar: write %s", topic)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ensureSubscription makes sure the durable subscription exists on topic,
// starting at the earliest message: it keeps everything it has not
// acknowledged from the broker's retention.
func (o *Opener) ensureSubscription(ctx context.Context, topic string) error {
	c, err := o.subscribe(ctx, topic)
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// subscribe attaches a consumer to the durable subscription of topic,
// retrying while another node's consumer (a concurrent truncation) holds
// it.
func (o *Opener) subscribe(ctx context.Context, topic string) (pulsar.Consumer, error) {
	pace := backoff.Config{Initial: 10 * time.Millisecond, Max: 500 * time.Millisecond, NoJitter: true}
	for attempt := 0; ; attempt++ {
		c, err := o.client.Subscribe(pulsar.ConsumerOptions{
			Topic:                       topic,
			SubscriptionName:            o.cfg.Subscription,
			Type:                        pulsar.Exclusive,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
			ReceiverQueueSize:           1,
			AckWithResponse:             true,
		})
		if err == nil {
			return c, nil
		}
		if !strings.Contains(err.Error(), "ConsumerBusy") {
			return nil, errors.Wrapf(err, "pulsar: subscribe %s to %s", o.cfg.Subscription, topic)
		}
		if err := pace.Wait(ctx, attempt); err != nil {
			return nil, err
		}
	}
}
