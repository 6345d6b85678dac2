package pulsar

import (
	"context"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"
)

// watcher tails a WAL's meta topic from the moment the WAL opens: a claim
// of a higher term (or a later claim of the same term) fences the WAL's
// writer at once, which closes its producer and so hands the topic to the
// claimant's waiting producer; a truncation record moves the WAL's
// truncation point. Its goroutine (run) owns the reader.
type watcher struct {
	w      *wal
	r      pulsar.Reader
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// startWatcher subscribes at the meta topic's end and starts the watcher.
func (w *wal) startWatcher() error {
	r, err := w.o.client.CreateReader(pulsar.ReaderOptions{
		Topic:          w.metaTopic,
		StartMessageID: pulsar.LatestMessageID(),
	})
	if err != nil {
		return errors.Wrapf(err, "pulsar: watch %s", w.metaTopic)
	}
	wa := &watcher{w: w, r: r, done: make(chan struct{})}
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
	defer wa.r.Close()
	w := wa.w
	var (
		last    msgID
		hasLast bool
		seenOwn bool // this WAL's own claim went by
	)
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
		if hasLast && id.compare(last) <= 0 {
			continue
		}
		if hasLast && !follows(last, id) {
			// The reader skipped a record (see the package
			// documentation): fold the whole topic instead.
			if st, err := w.o.readMeta(wa.ctx, w.metaTopic); err == nil {
				w.setTrunc(st.trunc, st.hasTrunc)
				if w.wr != nil && st.maxTerm >= 0 && st.winnerNonce != w.nonce && (seenOwn || st.maxTerm > w.ch.Term) {
					w.wr.fence(fencedError(w.ch.Name, w.ch.Term, st.maxTerm))
				}
			}
		}
		last, hasLast = id, true
		var st metaState
		st.maxTerm = -1
		st.apply(m.Properties())
		w.setTrunc(st.trunc, st.hasTrunc)
		if st.maxTerm < 0 || w.wr == nil {
			continue
		}
		switch {
		case st.winnerNonce == w.nonce:
			seenOwn = true
		case st.maxTerm > w.ch.Term, st.maxTerm == w.ch.Term && seenOwn:
			w.wr.fence(fencedError(w.ch.Name, w.ch.Term, st.maxTerm))
		}
	}
}
