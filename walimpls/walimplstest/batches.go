package walimplstest

import (
	"context"
	"fmt"
	"sync"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Batch scanners (walimpls.BatchReader) keep every promise of Read's
// scanners; only the unit of delivery differs. The suite checks them by
// running its reading parts a second time, under "Batches", on WALs whose
// Read goes through ReadBatches: the scanner a part gets takes the slices
// apart (unbatched), and checks on the way what only slices can get wrong.

// batchParts are the parts that run again under "Batches": those that read.
var batchParts = map[string]bool{
	"ConcurrentAppendRead":       true,
	"CallerBuffers":              true,
	"AppendBatch":                true,
	"IDOrder":                    true,
	"DeliverPolicies":            true,
	"DeliverTail":                true,
	"LatestStartsAtRead":         true,
	"IdleTail":                   true,
	"Truncate":                   true,
	"TruncateBoundaries":         true,
	"TruncateOvertakesScanner":   true,
	"FuturePosition":             true,
	"ScannerContract":            true,
	"ScannerOutlivesReadContext": true,
	"ReadOnly":                   true,
	"Delete":                     true,
}

// batchedWAL is a WAL whose Read goes through ReadBatches.
type batchedWAL struct {
	walimpls.WALImpl
	br walimpls.BatchReader
	e  *env
}

func (w *batchedWAL) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	bs, err := w.br.ReadBatches(ctx, opt)
	if err != nil {
		return nil, err
	}
	if bs == nil {
		return nil, nil // the part fails on it
	}
	return newUnbatched(w.e, bs), nil
}

// unbatched turns a batch scanner into a scanner. Its goroutine forwards
// the messages of each slice and then clears the slice, as a receiver may:
// a backend that still read a slice it handed over would deliver zero
// messages, or race. An empty slice breaks the contract: the scanner
// then ends with that error, and the part fails (env.batchViolations).
type unbatched struct {
	bs   walimpls.BatchScanner
	out  chan message.Immutable
	stop chan struct{}
	done chan struct{}

	stopOnce sync.Once
	err      error // set before done closes
}

func newUnbatched(e *env, bs walimpls.BatchScanner) *unbatched {
	u := &unbatched{bs: bs, out: make(chan message.Immutable), stop: make(chan struct{}), done: make(chan struct{})}
	go u.run(e)
	return u
}

func (u *unbatched) run(e *env) {
	defer close(u.done)
	defer close(u.out)
	var violation error
	n := 0
	for batch := range u.bs.Batches() {
		if len(batch) == 0 && violation == nil {
			violation = fmt.Errorf("batch scanner delivered an empty slice after %d messages", n)
			e.violated(violation)
			_ = u.bs.Close()
		}
		for i, m := range batch {
			select {
			case u.out <- m:
				n++
			case <-u.stop:
			}
			batch[i] = message.Immutable{}
		}
	}
	// Batches closed: the backend's scanner ended; Done follows.
	<-u.bs.Done()
	u.err = u.bs.Error()
	if violation != nil {
		u.err = violation
	}
}

func (u *unbatched) Chan() <-chan message.Immutable { return u.out }
func (u *unbatched) Done() <-chan struct{}          { return u.done }

func (u *unbatched) Error() error {
	select {
	case <-u.done:
		return u.err
	default:
		return nil
	}
}

func (u *unbatched) Close() error {
	u.stopOnce.Do(func() { close(u.stop) })
	err := u.bs.Close()
	<-u.done
	return err
}
