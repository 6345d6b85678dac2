package pulsar

import (
	"context"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"
)

// watcher tails a WAL's meta topic from the last record the WAL's opening
// fold saw: a claim of a higher term (or a later claim of the same term)
// fences the WAL's writer at once, which closes its producer (or gives up
// waiting for one) and so hands the topic to the claimant; a truncation
// record moves the WAL's truncation point; a deletion record finishes the
// WAL (wal.finishDeleted) and ends the watcher, which closes its reader
// first: the meta topic is about to be deleted, and a reader that came
// back would create it again. Its goroutine (run) owns the reader.
type watcher struct {
	w      *wal
	r      pulsar.Reader
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// owned by run; set by startWatcher before run starts
	last    msgID // last record handled; valid if hasLast
	hasLast bool
}

// startWatcher starts the watcher right after the last record st folded,
// or at the topic's start when st folded none: a record written after the
// fold cannot escape both.
func (w *wal) startWatcher(st metaState) error {
	opts := pulsar.ReaderOptions{Topic: w.metaTopic, StartMessageID: pulsar.EarliestMessageID(), StartMessageIDInclusive: true}
	if st.hasLast {
		opts.StartMessageID, opts.StartMessageIDInclusive = st.last.toPulsar(), false
	}
	r, err := w.o.client.CreateReader(opts)
	if err != nil {
		return errors.Wrapf(err, "pulsar: watch %s", w.metaTopic)
	}
	wa := &watcher{w: w, r: r, done: make(chan struct{}), last: st.last, hasLast: st.hasLast}
	wa.ctx, wa.cancel = context.WithCancel(context.Background())
	w.watch = wa
	go wa.run()
	return nil
}

func (wa *watcher) stop() {
	wa.cancel()
	<-wa.done
}

func (wa *watcher) run() {
	defer close(wa.done)
	defer func() {
		if wa.r != nil {
			wa.r.Close()
		}
	}()
	w := wa.w
	// deleted finishes the WAL on a deletion record; run returns after it.
	deleted := func() {
		wa.r.Close()
		wa.r = nil
		w.finishDeleted()
	}
	seenOwn := false // this WAL's own claim went by
	for {
		m, err := wa.r.Next(wa.ctx)
		if wa.ctx.Err() != nil {
			return
		}
		if err != nil {
			w.log.Debug("meta watcher", "err", err)
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-wa.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		id := fromPulsar(m.ID())
		if wa.hasLast && id.compare(wa.last) <= 0 {
			continue
		}
		// The meta topic is never trimmed: its first record is entry 0 of
		// a ledger, and every later one follows the one before.
		if gap := wa.hasLast && !follows(wa.last, id) || !wa.hasLast && (id.entry != 0 || id.batch > 0); gap {
			// The reader skipped a record (see the package
			// documentation): fold the whole topic instead.
			if st, err := w.o.readMeta(wa.ctx, w.metaTopic, w.nonce); err == nil {
				if st.deleted {
					deleted()
					return
				}
				w.setTrunc(st.trunc, st.hasTrunc)
				seenOwn = seenOwn || st.mineSeen
				if w.wr != nil && st.maxTerm >= 0 && st.winnerNonce != w.nonce && (seenOwn || st.maxTerm > w.ch.Term) {
					w.wr.setFence(fencedError(w.ch.Name, w.ch.Term, st.maxTerm))
				}
			}
		}
		wa.last, wa.hasLast = id, true
		st := metaState{maxTerm: -1}
		st.apply(m.Properties())
		if st.deleted {
			deleted()
			return
		}
		w.setTrunc(st.trunc, st.hasTrunc)
		if st.maxTerm < 0 || w.wr == nil {
			continue
		}
		switch {
		case st.winnerNonce == w.nonce:
			seenOwn = true
		case st.maxTerm > w.ch.Term, st.maxTerm == w.ch.Term && seenOwn:
			w.wr.setFence(fencedError(w.ch.Name, w.ch.Term, st.maxTerm))
		}
	}
}
