package s3

import (
	"context"
	"crypto/rand"
	"slices"
	"strconv"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// getManifest reads a channel's manifest and its ETag; a channel without
// one is errNotFound.
func (o *Opener) getManifest(ctx context.Context, name string) (*manifest, string, error) {
	key := o.keys.manifest(name)
	b, etag, err := o.st.get(ctx, key)
	if err != nil {
		return nil, "", errors.Wrapf(err, "s3: read manifest %s", key)
	}
	m, err := decodeManifest(key, b)
	if err != nil {
		return nil, "", err
	}
	return m, etag, nil
}

// putManifest replaces the manifest read with etag (etag "": creates it).
// A 412 is errPrecondition: decide again on a fresh read.
func (o *Opener) putManifest(ctx context.Context, name string, m *manifest, etag string) error {
	cond := putCond{createOnly: etag == "", ifMatch: etag}
	m.V, m.Channel = manifestVersion, name
	m.Rev++
	_, err := o.st.put(ctx, reqPut, o.keys.manifest(name), m.encode(), nil, cond)
	return err
}

// claim opens channel ch ReadWrite (see the package doc, "Opening
// ReadWrite at term T"): it seals the open epoch and records a new one,
// which it returns with the manifest written.
func (o *Opener) claim(ctx context.Context, ch walimpls.Channel) (epochEntry, *manifest, error) {
	var id nonce
	_, _ = rand.Read(id[:])
	claimID := id.String()
	for {
		if err := ctx.Err(); err != nil {
			return epochEntry{}, nil, err
		}
		cur, etag, err := o.getManifest(ctx, ch.Name)
		var next *manifest
		switch {
		case errors.Is(err, errNotFound):
			next = &manifest{NextEpoch: 0}
			etag = ""
		case err != nil:
			return epochEntry{}, nil, err
		case cur.Deleted:
			// A new channel under a deleted one's name: its epochs go on
			// from the tombstone's counter, and the deleted channel's
			// positions are gone.
			next = &manifest{Rev: cur.Rev, NextEpoch: cur.NextEpoch}
			next.Truncated = &manifestPos{Epoch: cur.NextEpoch}
		default:
			if e, ok := cur.open(); ok && e.Claim == claimID {
				// This open's own write, landed on a try whose answer
				// was lost (its retry met 412).
				o.log.Info("opened", "channel", ch.Name, "term", ch.Term, "epoch", e.Epoch, "manifest", cur.describe(), "answerLost", true)
				return e, cur, nil
			}
			if ch.Term < cur.Term && o.fencing {
				return epochEntry{}, nil, errors.Wrapf(fencedError(ch, cur.Term, false), "s3: open %s", ch)
			}
			next = cur.clone()
			if e, ok := cur.open(); ok {
				end, err := o.seal(ctx, ch.Name, cur, e, ch.Term, false)
				if err != nil {
					return epochEntry{}, nil, err
				}
				last := &next.Epochs[len(next.Epochs)-1]
				last.Sealed, last.End = true, &end
				if end < 0 {
					next.Epochs = next.Epochs[:len(next.Epochs)-1] // it holds nothing
				}
			}
		}
		e := epochEntry{Epoch: next.NextEpoch, Term: ch.Term, Window: o.cfg.window(), Claim: claimID}
		next.Epochs = append(next.Epochs, e)
		next.NextEpoch++
		next.Term = max(next.Term, ch.Term)
		err = o.putManifest(ctx, ch.Name, next, etag)
		if errors.Is(err, errPrecondition) {
			o.log.Debug("the manifest changed under an open: reading it again", "channel", ch.Name, "term", ch.Term)
			continue
		}
		if err != nil {
			return epochEntry{}, nil, errors.Wrapf(err, "s3: open %s: write manifest", ch)
		}
		o.log.Info("opened", "channel", ch.Name, "term", ch.Term, "epoch", e.Epoch, "manifest", next.describe())
		return e, next, nil
	}
}

// slotState is what a slot holds.
type slotState uint8

const (
	slotMissing slotState = iota
	slotData
	slotFence
)

// slotInfo is a HEAD's answer about a slot.
type slotInfo struct {
	state   slotState
	count   uint32 // records (data)
	term    int64
	deleted bool // a fence left by Delete
	nonce   string
	// sealFrom is a fence's first slot of its sealing round (hasSealFrom:
	// the fence says; fences written before the key existed do not).
	sealFrom    uint64
	hasSealFrom bool
}

// headSlot classifies a slot by its metadata.
func (o *Opener) headSlot(ctx context.Context, name string, epoch, slot uint64) (slotInfo, error) {
	meta, err := o.st.head(ctx, o.keys.slot(name, epoch, slot))
	if errors.Is(err, errNotFound) {
		return slotInfo{state: slotMissing}, nil
	}
	if err != nil {
		return slotInfo{}, err
	}
	return parseSlotMeta(meta), nil
}

func parseSlotMeta(meta map[string]string) slotInfo {
	info := slotInfo{state: slotData, nonce: meta[metaNonce]}
	if meta[metaKind] == "fence" {
		info.state = slotFence
	}
	info.term, _ = strconv.ParseInt(meta[metaTerm], 10, 64)
	if c, err := strconv.ParseUint(meta[metaCount], 10, 32); err == nil {
		info.count = uint32(c)
	}
	info.deleted = meta[metaDeleted] == "true"
	if f, err := strconv.ParseUint(meta[metaSealFrom], 10, 64); err == nil {
		info.sealFrom, info.hasSealFrom = f, true
	}
	return info
}

// readHint returns the slot an epoch's hint names, and false without one.
func (o *Opener) readHint(ctx context.Context, name string, epoch uint64) (uint64, bool, error) {
	b, _, err := o.st.get(ctx, o.keys.hint(name, epoch))
	if errors.Is(err, errNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, false, nil // advisory: a bad hint is no hint
	}
	return s, true, nil
}

// firstClosed finds the first slot at or after lo of an open epoch that
// holds no data (missing, or a fence), given that every slot below lo
// holds data (see the package doc, "Finding the tail of an epoch"). It
// returns the slot and what it holds.
func (o *Opener) firstClosed(ctx context.Context, name string, e epochEntry, lo uint64) (uint64, slotInfo, error) {
	if h, ok, err := o.readHint(ctx, name, e.Epoch); err != nil {
		return 0, slotInfo{}, err
	} else if ok && h+1 > lo {
		lo = h + 1
	}
	known := map[uint64]slotInfo{}
	look := func(s uint64) (slotInfo, error) {
		if info, ok := known[s]; ok {
			return info, nil
		}
		info, err := o.headSlot(ctx, name, e.Epoch, s)
		if err != nil {
			return slotInfo{}, err
		}
		known[s] = info
		return info, nil
	}
	// Probe lo, lo+1, lo+3, lo+7, ... until a slot holds no data.
	dataAt, have := uint64(0), false // the highest probed slot with data
	var closedAt uint64
	for step := uint64(1); ; step *= 2 {
		s := lo + step - 1
		info, err := look(s)
		if err != nil {
			return 0, slotInfo{}, err
		}
		if info.state != slotData {
			closedAt = s
			break
		}
		dataAt, have = s, true
	}
	// Binary search between: b-1 holds data (or b = lo), b holds none.
	loB := lo
	if have {
		loB = dataAt + 1
	}
	b := closedAt
	for loB < b {
		mid := loB + (b-loB)/2
		info, err := look(mid)
		if err != nil {
			return 0, slotInfo{}, err
		}
		if info.state == slotData {
			loB = mid + 1
		} else {
			b = mid
		}
	}
	// Pipelined flushes: data at x means data at every slot up to
	// x-window, so the slots holding no data lie within a window below
	// the highest slot with data, which lies within a window above b.
	w := e.window()
	p, pData := uint64(0), false
	if b > lo {
		p, pData = b-1, true
	}
	for s := b + 1; s < b+w; s++ {
		info, err := look(s)
		if err != nil {
			return 0, slotInfo{}, err
		}
		if info.state == slotData {
			p, pData = s, true
		}
	}
	first := b
	if pData {
		from := lo
		if p+1 > w && p+1-w > from {
			from = p + 1 - w
		}
		for s := from; s < p && s < first; s++ {
			info, err := look(s)
			if err != nil {
				return 0, slotInfo{}, err
			}
			if info.state != slotData {
				first = s
				break
			}
		}
	}
	return first, known[first], nil
}

// seal fences epoch e of the manifest m at its first slot holding no data
// and returns its last slot (-1: none). deleted marks a Delete's fence.
// See the package doc, "Opening ReadWrite at term T", step 3.
func (o *Opener) seal(ctx context.Context, name string, m *manifest, e epochEntry, term int64, deleted bool) (int64, error) {
	s, info, err := o.firstClosed(ctx, name, e, m.firstSlot(e.Epoch))
	if err != nil {
		return 0, errors.Wrapf(err, "s3: seal epoch %d of %q", e.Epoch, name)
	}
	if info.state == slotFence {
		return int64(s) - 1, nil // fenced already, by a concurrent open
	}
	// One fence at the tail. Should a late flush of the epoch's writer land
	// there first, it is still flushing: fence a range at a time from the
	// next slot, a window wide and then doubling while the writer fills
	// every slot of one before the fences land.
	from, width := s, uint64(1)
	for {
		fenced, ours, err := o.fenceRange(ctx, name, e.Epoch, from, width, term, deleted)
		if err != nil {
			return 0, err
		}
		if i := slices.Index(fenced, true); i >= 0 {
			end := from + uint64(i)
			o.log.Info("sealed an epoch", "channel", name, "epoch", e.Epoch, "fence", end, "term", term, "deleted", deleted, "tail", s)
			o.removeSpareFences(ctx, name, e.Epoch, from, end, ours)
			return int64(end) - 1, nil
		}
		o.log.Debug("late flushes filled the fenced range: fencing the next", "channel", name, "epoch", e.Epoch, "from", from, "width", width)
		from, width = from+width, min(max(2*width, e.window()), max(e.window(), maxSealWidth))
	}
}

const (
	// maxSealWidth bounds the range of slots one sealing round fences.
	maxSealWidth = 1024
	// sealParallel bounds the fences one sealing round has in flight.
	sealParallel = 64
)

// fenceRange puts fences at slots from .. from+width-1 in parallel, and
// reports which hold a fence afterwards and which of those this open put.
func (o *Opener) fenceRange(ctx context.Context, name string, epoch, from, width uint64, term int64, deleted bool) (fenced, ours []bool, err error) {
	fenced, ours = make([]bool, width), make([]bool, width)
	errs := make([]error, width)
	var wg sync.WaitGroup
	slots := make(chan struct{}, sealParallel)
	for i := range width {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			fenced[i], ours[i], errs[i] = o.putFence(ctx, name, epoch, from+i, from, term, deleted)
		}()
	}
	wg.Wait()
	// A slot after the first fence need not have answered.
	for i := range width {
		if errs[i] != nil {
			return nil, nil, errs[i]
		}
		if fenced[i] {
			break
		}
	}
	return fenced, ours, nil
}

// removeSpareFences deletes the fences this open put after the seal at end
// (ours[i]: slot from+i). They are harmless where they are, so a failure
// is only logged: they then stay until Delete.
func (o *Opener) removeSpareFences(ctx context.Context, name string, epoch, from, end uint64, ours []bool) {
	var spare []string
	for i, mine := range ours {
		if s := from + uint64(i); mine && s > end {
			spare = append(spare, o.keys.slot(name, epoch, s))
		}
	}
	if len(spare) == 0 {
		return
	}
	if err := o.st.remove(ctx, spare); err != nil {
		o.log.Warn("could not remove spare fences above a seal; they stay until Delete", "channel", name, "epoch", epoch, "end", end, "fences", len(spare), "err", err)
	}
}

// putFence puts a fence at slot s of an epoch, create-only, and reports
// whether the slot holds a fence afterwards (fenced; ours: this one), or
// else data. from is the first slot of the sealing round.
func (o *Opener) putFence(ctx context.Context, name string, epoch, s, from uint64, term int64, deleted bool) (fenced, ours bool, err error) {
	// A fence carries a nonce like a flush (doc.go, "An object"); a retry
	// that meets 412 needs none of it: a fence in the slot seals the epoch
	// there whoever wrote it.
	var n nonce
	_, _ = rand.Read(n[:])
	meta := map[string]string{
		metaKind: "fence", metaTerm: strconv.FormatInt(term, 10), metaCount: "0", metaNonce: n.String(),
		metaSealFrom: strconv.FormatUint(from, 10),
	}
	if deleted {
		meta[metaDeleted] = "true"
	}
	key := o.keys.slot(name, epoch, s)
	for {
		_, err := o.st.put(ctx, reqPut, key, fenceObject(epoch, s, term, n), meta, putCond{createOnly: true})
		if err == nil {
			return true, true, nil
		}
		if !errors.Is(err, errPrecondition) {
			return false, false, errors.Wrapf(err, "s3: fence %s", key)
		}
		info, err := o.headSlot(ctx, name, epoch, s)
		if err != nil {
			return false, false, errors.Wrapf(err, "s3: fence %s", key)
		}
		switch info.state {
		case slotFence: // this open's own, when an earlier try landed
			return true, info.nonce == n.String(), nil
		case slotData:
			return false, false, nil
		}
		// Gone between the two: a Delete's sweep removes data (never a
		// fence) of the epoch being sealed; this open's manifest write
		// will meet its tombstone. Put the fence again.
		if err := ctx.Err(); err != nil {
			return false, false, errors.Wrapf(err, "s3: fence %s", key)
		}
	}
}
