package pulsar

// batch is the bookkeeping of one AppendBatch (an Append is a batch of one)
// while the writer hands its messages to the producer and collects their
// results. Pure logic: no locks, no goroutines, no I/O; owned by the
// writer's run goroutine.
//
// Messages are handed over in slice order, so msgs[:sent] were handed and
// msgs[sent:] were not. Every handed message gets one result: stored (with
// its id) or failed. The batch settles when every handed message has its
// result and nothing more will be handed; its outcome is then the ids of
// the leading stored messages and, if that is not all of them, the error
// of the first message that was not stored. That message is always the
// first failure by index: a message is handed only after every earlier one,
// so when the batch settles every message before the first failure has a
// result, and none of them failed.
type batch struct {
	n       int
	sent    int  // msgs[:sent] were handed to the producer
	pending int  // handed messages without a result yet
	stopped bool // nothing more will be handed over
	ids     []msgID
	stored  []bool
	failAt  int   // index of the first failed message; n when none
	err     error // the error of msgs[failAt]
}

func newBatch(n int) batch {
	return batch{n: n, ids: make([]msgID, n), stored: make([]bool, n), failAt: n}
}

// unsent is the number of messages not handed over yet (and that may
// still be).
func (b *batch) unsent() int {
	if b.stopped {
		return 0
	}
	return b.n - b.sent
}

// handed records that msgs[sent] was handed to the producer.
func (b *batch) handed() {
	if b.stopped || b.sent == b.n {
		panic("pulsar: batch: a message handed over after the batch was done")
	}
	b.sent++
	b.pending++
}

// storedAt records the receipt of msgs[i].
func (b *batch) storedAt(i int, id msgID) {
	b.result(i)
	b.ids[i], b.stored[i] = id, true
}

// failedAt records that msgs[i] failed with err.
func (b *batch) failedAt(i int, err error) {
	b.result(i)
	b.fail(i, err)
}

func (b *batch) result(i int) {
	if i < 0 || i >= b.sent || b.stored[i] || b.pending == 0 {
		panic("pulsar: batch: a result for a message not in flight")
	}
	b.pending--
}

// fail keeps the failure with the lowest index.
func (b *batch) fail(i int, err error) {
	if i < b.failAt {
		b.failAt, b.err = i, err
	}
}

// stop hands nothing more over: msgs[sent:] are not stored, for the
// reason err (used only if no earlier message fails). Idempotent.
func (b *batch) stop(err error) {
	if b.stopped {
		return
	}
	b.stopped = true
	if b.sent < b.n {
		b.fail(b.sent, err)
	}
}

// abandon gives up the results still pending (their producer is gone):
// they fail with err, and nothing more is handed over.
func (b *batch) abandon(err error) {
	if b.pending > 0 {
		first := 0
		for first < b.sent && b.stored[first] {
			first++
		}
		b.fail(first, err)
		b.pending = 0
	}
	b.stop(err)
}

// settled reports that every handed message has its result and nothing
// more will be handed over.
func (b *batch) settled() bool {
	return b.pending == 0 && (b.stopped || b.sent == b.n)
}

// outcome returns the ids of the leading stored messages and, unless
// that is all of them, the error of the first one not stored. Only for a
// settled batch.
func (b *batch) outcome() ([]msgID, error) {
	if !b.settled() {
		panic("pulsar: batch: outcome of a batch not settled")
	}
	k := 0
	for k < b.n && b.stored[k] {
		k++
	}
	if k == b.n {
		return b.ids, nil
	}
	if k != b.failAt || b.err == nil {
		panic("pulsar: batch: the first message not stored is not the first failure")
	}
	return b.ids[:k], b.err
}
