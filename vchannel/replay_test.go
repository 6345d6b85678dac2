package vchannel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/vchannel"
	"github.com/streamwal/streamwal/walimpls"
)

// fill appends perVC messages to each of vcs through their views, one
// goroutine per vchannel (so each vchannel's order is its appender's), and
// returns each vchannel's payloads in order.
func fill(t *testing.T, w adaptor.WAL, vcs []string, perVC int) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	want := make(map[string][]string, len(vcs))
	errs := make(chan error, len(vcs))
	for _, vc := range vcs {
		v := view(t, w, vc)
		ps := make([]string, perVC)
		for i := range ps {
			ps[i] = fmt.Sprintf("%s/%04d", vc, i)
		}
		want[vc] = ps
		go func() {
			for _, p := range ps {
				if _, err := v.Append(ctx, msg(t, p)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range vcs {
		require.NoError(t, <-errs)
	}
	require.NoError(t, w.Sync(ctx))
	return want
}

func vcNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = vcName(i)
	}
	return out
}

func replay(t *testing.T, w adaptor.WAL, consumers []vchannel.Consumer, opts vchannel.ReplayOptions) *vchannel.Replayer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	r, err := vchannel.Replay(ctx, w, consumers, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func scanner(t *testing.T, r *vchannel.Replayer, vc string) walimpls.Scanner {
	t.Helper()
	s, ok := r.Scanner(vc)
	require.True(t, ok, "no scanner for %s", vc)
	return s
}

// readAll reads every vchannel's scanner to its expected messages
// concurrently and checks them against want.
func readAll(t *testing.T, r *vchannel.Replayer, want map[string][]string) {
	t.Helper()
	var wg sync.WaitGroup
	got := make(map[string][]message.Immutable, len(want))
	var mu sync.Mutex
	for vc, w := range want {
		s := scanner(t, r, vc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := recvN(t, s, len(w))
			mu.Lock()
			got[vc] = msgs
			mu.Unlock()
		}()
	}
	wg.Wait()
	for vc, w := range want {
		require.Equal(t, w, payloads(t, vc, got[vc]), "vchannel %s", vc)
	}
}

// Several consumers resume from different checkpoints (the zero one among
// them): each is delivered exactly what a scanner of its own started after
// its checkpoint would deliver, and what it is delivered resumes the same
// way.
func TestReplayFromCheckpoints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		w := openWAL(t, b.open(t), "pch", adaptor.Options{})
		vcs := vcNames(6)
		want := fill(t, w, vcs, 20)
		// What each vchannel's own scanner delivers: the reference, and
		// the messages checkpoints are taken from.
		ref := map[string][]message.Immutable{}
		for _, vc := range vcs {
			s, err := view(t, w, vc).Read(context.Background(), adaptor.ReadOption{})
			require.NoError(t, err)
			ref[vc] = recvN(t, s, 20)
			require.Equal(t, want[vc], payloads(t, vc, ref[vc]))
			require.NoError(t, s.Close())
		}
		after := map[string]int{vcs[0]: 0, vcs[1]: 1, vcs[2]: 10, vcs[3]: 20, vcs[4]: 6, vcs[5]: 0} // messages already processed
		var consumers []vchannel.Consumer
		for _, vc := range vcs {
			c := vchannel.Consumer{VChannel: vc}
			if n := after[vc]; n > 0 {
				cp, err := cursor.CheckpointOf(ref[vc][n-1])
				require.NoError(t, err)
				c.After = cp
			}
			consumers = append(consumers, c)
		}
		r := replay(t, w, consumers, vchannel.ReplayOptions{})
		rest := map[string][]string{}
		for _, vc := range vcs {
			rest[vc] = want[vc][after[vc]:]
		}
		readAll(t, r, rest)
		// Nothing more of any vchannel until new appends, which reach the
		// replay as they come.
		for _, vc := range vcs {
			nothingBefore(t, w, scanner(t, r, vc), vc)
		}
		require.Zero(t, r.Detachments())

		// A message the replay delivered resumes like one an adaptor
		// scanner delivered.
		s, err := view(t, w, vcs[2]).Read(context.Background(), adaptor.ReadOption{})
		require.NoError(t, err)
		all := recvN(t, s, 21) // the marker too
		require.NoError(t, s.Close())
		cp, err := cursor.CheckpointOf(all[14])
		require.NoError(t, err)
		r2 := replay(t, w, []vchannel.Consumer{{VChannel: vcs[2], After: cp}}, vchannel.ReplayOptions{})
		got := recvN(t, scanner(t, r2, vcs[2]), 6)
		require.Equal(t, append(want[vcs[2]][15:], "marker"), payloads(t, vcs[2], got))

		require.NoError(t, r.Close())
		require.NoError(t, r.Close())
		for _, vc := range vcs {
			s := scanner(t, r, vc)
			<-s.Done()
			require.NoError(t, s.Error(), "a closed replay's scanners end without error")
			_, open := <-s.Chan()
			require.False(t, open)
		}
	})
}

// 128 vchannels on one pchannel, appended concurrently while a replay from
// the start reads them: every consumer gets its vchannel's messages, in its
// appender's order, and the replay reads each backend message at most once.
// Messages of vchannels nobody replays, and of none, are appended among
// them (with this many consumers the router, not the adaptor, drops them).
func TestReplayManyVChannelsWithConcurrentAppenders(t *testing.T) {
	perVC := map[string]int{"memory": 40, "local": 40, "kafka": 4}
	forEachBackend(t, func(t *testing.T, b backend) {
		counter := newReadCounter(true)
		w := openWAL(t, counter.wrap(b.open(t)), "pch", adaptor.Options{})
		const nvc, appenders = 128, 16
		n := perVC[b.name]
		vcs := vcNames(nvc)
		consumers := make([]vchannel.Consumer, nvc)
		for i, vc := range vcs {
			consumers[i] = vchannel.Consumer{VChannel: vc}
		}
		r := replay(t, w, consumers, vchannel.ReplayOptions{})

		ctx, cancel := context.WithTimeout(context.Background(), watchdog)
		defer cancel()
		want := map[string][]string{}
		for _, vc := range vcs {
			for i := range n {
				want[vc] = append(want[vc], fmt.Sprintf("%s/%04d", vc, i))
			}
		}
		var wg sync.WaitGroup
		failed := make(chan error, appenders)
		for a := range appenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each appender owns every appenders-th vchannel and
				// interleaves them.
				for i := range n {
					for j := a; j < nvc; j += appenders {
						v, err := vchannel.New(w, vcs[j])
						if err == nil {
							_, err = v.Append(ctx, msg(t, want[vcs[j]][i]))
						}
						if err != nil {
							failed <- err
							return
						}
					}
					_, err := w.Append(ctx, msg(t, "other").WithVChannel(fmt.Sprintf("other-%d", a)))
					if err == nil {
						_, err = w.Append(ctx, msg(t, "none"))
					}
					if err != nil {
						failed <- err
						return
					}
				}
			}()
		}
		readAll(t, r, want)
		wg.Wait()
		close(failed)
		require.NoError(t, <-failed)
		require.Zero(t, r.Detachments())
		require.NoError(t, r.Close())
		for id, n := range counter.timesRead(func(name string) bool { return name == "replay" }) {
			require.Equal(t, 1, n, "message %s read %d times by the replay", id, n)
		}
	})
}

// The pchannel is read once however many vchannels a replay serves;
// scanners of their own read it once each. Reads are counted where the
// backend hands messages out, by scanners opened after the WAL (its tail
// reader apart).
func TestReplayReadsEachMessageOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		o := b.open(t)
		const nvc, perVC = 32, 10
		vcs := vcNames(nvc)
		writer := openWAL(t, o, "pch", adaptor.Options{})
		want := fill(t, writer, vcs, perVC)
		require.NoError(t, writer.Close())
		logIDs, lastData := backendLog(t, o, "pch")

		counter := newReadCounter(true)
		w := openWAL(t, counter.wrap(o), "pch", adaptor.Options{ReadOnly: true})
		consumers := make([]vchannel.Consumer, nvc)
		for i, vc := range vcs {
			consumers[i] = vchannel.Consumer{VChannel: vc}
		}
		r := replay(t, w, consumers, vchannel.ReplayOptions{})
		readAll(t, r, want)
		require.NoError(t, r.Close())
		replayed := counter.timesRead(func(name string) bool { return name == "replay" })
		for i, id := range logIDs[:lastData+1] {
			require.Equal(t, 1, replayed["pch|"+id], "log message %d (%s)", i, id)
		}
		reads := counter.reads(func(name string) bool { return !tailOrRecovery(name) })
		t.Logf("fan-out of %d vchannels: %d backend reads for a log of %d messages up to its last data message: amplification %.2fx",
			nvc, reads, lastData+1, float64(reads)/float64(lastData+1))

		// The same vchannels through scanners of their own: each reads
		// the pchannel again.
		const own = 4
		for _, vc := range vcs[:own] {
			s, err := view(t, w, vc).Read(context.Background(), adaptor.ReadOption{Name: "own"})
			require.NoError(t, err)
			require.Equal(t, want[vc], payloads(t, vc, recvN(t, s, perVC)))
			require.NoError(t, s.Close())
		}
		ownReads := counter.readsOf("own")
		t.Logf("%d scanners of their own: %d backend reads: amplification %.2fx", own, ownReads, float64(ownReads)/float64(lastData+1))
		require.Greater(t, ownReads, reads, "the counter must see a second read of the pchannel")
	})
}

// backendLog reads a channel's log straight from the backend, to its last
// message, and returns the IDs (as strings) in order and the index of the
// last data message.
func backendLog(t *testing.T, o walimpls.Opener, ch string) (ids []string, lastData int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	impl, err := o.Open(ctx, walimpls.Channel{Name: ch, Mode: walimpls.ReadOnly})
	require.NoError(t, err)
	defer impl.Close()
	last, err := impl.Last(ctx)
	require.NoError(t, err)
	s, err := impl.Read(ctx, walimpls.ReadOption{Name: "reference"})
	require.NoError(t, err)
	defer s.Close()
	lastData = -1
	for {
		m := recvN(t, s, 1)[0]
		if m.Kind() == message.KindData {
			lastData = len(ids)
		}
		ids = append(ids, m.ID().String())
		if m.ID().EQ(last) {
			return ids, lastData
		}
	}
}

// A consumer whose reader stalls is detached once the others wait for it:
// they finish without it, reading the pchannel once; it later reads every
// message of its own, nothing lost or twice, and only its catch-up reads
// the pchannel again.
func TestSlowConsumerDetachesAndCatchesUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		o := b.open(t)
		const nvc, perVC = 8, 60
		vcs := vcNames(nvc)
		writer := openWAL(t, o, "pch", adaptor.Options{})
		want := fill(t, writer, vcs, perVC)
		require.NoError(t, writer.Close())

		counter := newReadCounter(true)
		w := openWAL(t, counter.wrap(o), "pch", adaptor.Options{ReadOnly: true})
		consumers := make([]vchannel.Consumer, nvc)
		for i, vc := range vcs {
			consumers[i] = vchannel.Consumer{VChannel: vc}
		}
		// The slow consumer's budget holds a few of its messages; the
		// others' (the default) hold all of theirs, so that only the slow
		// one can ever be full.
		slow := vcs[0]
		consumers[0].BufferBytes = 2 << 10
		detached := make(chan string, nvc)
		r := replay(t, w, consumers, vchannel.WithDetachHook(vchannel.ReplayOptions{}, func(vc string) { detached <- vc }))

		others := map[string][]string{}
		for _, vc := range vcs[1:] {
			others[vc] = want[vc]
		}
		readAll(t, r, others) // the slow consumer has not read anything
		select {
		case vc := <-detached:
			require.Equal(t, slow, vc)
		case <-time.After(watchdog):
			t.Fatal("watchdog: the slow consumer was never detached")
		}
		require.Equal(t, 1, r.Detachments())

		got := recvN(t, scanner(t, r, slow), perVC)
		require.Equal(t, want[slow], payloads(t, slow, got))
		require.Empty(t, detached)
		require.NoError(t, r.Close())

		// The shared reader read each message once; only the slow
		// consumer's own scanner read the pchannel again.
		for id, n := range counter.timesRead(func(name string) bool { return name == "replay" }) {
			require.Equal(t, 1, n, "message %s read %d times by the shared reader", id, n)
		}
		names := map[string]bool{}
		counter.mu.Lock()
		for name, n := range counter.byName {
			if n.Load() > 0 && !tailOrRecovery(name) {
				names[name] = true
			}
		}
		counter.mu.Unlock()
		require.Equal(t, map[string]bool{"replay": true, "replay/" + slow: true}, names)
		shared, own := counter.readsOf("replay"), counter.readsOf("replay/"+slow)
		t.Logf("shared reader: %d backend reads; the slow consumer's own: %d; amplification %.2fx",
			shared, own, float64(shared+own)/float64(shared))
	})
}

// When every consumer is behind, none runs dry: the replay waits for them
// rather than detaching them all (which would read the pchannel once per
// consumer), and delivers everything once they read.
func TestSlowConsumersAllBehindHoldTheReplay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		w := openWAL(t, b.open(t), "pch", adaptor.Options{})
		vcs := vcNames(4)
		// Round-robin, so that every stream holds a message before the
		// first one is full.
		ctx, cancel := context.WithTimeout(context.Background(), watchdog)
		defer cancel()
		want := map[string][]string{}
		for i := range 40 {
			for _, vc := range vcs {
				p := fmt.Sprintf("%s/%04d", vc, i)
				_, err := view(t, w, vc).Append(ctx, msg(t, p))
				require.NoError(t, err)
				want[vc] = append(want[vc], p)
			}
		}
		consumers := make([]vchannel.Consumer, len(vcs))
		for i, vc := range vcs {
			consumers[i] = vchannel.Consumer{VChannel: vc, BufferBytes: 1 << 10}
		}
		r := replay(t, w, consumers, vchannel.ReplayOptions{})
		require.Eventually(t, func() bool { return vchannel.RouterWaiting(r) }, watchdog, time.Millisecond)
		require.Zero(t, r.Detachments(), "nobody ran dry, nobody is detached")
		readAll(t, r, want)
	})
}

// A consumer that closes its scanner ends alone; the others go on. When no
// consumer is left attached, the shared scanner is closed.
func TestConsumerClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		reg := prometheus.NewRegistry()
		metrics, err := adaptor.NewMetrics(reg)
		require.NoError(t, err)
		w := openWAL(t, b.open(t), "pch", adaptor.Options{Metrics: metrics})
		vcs := vcNames(4)
		want := fill(t, w, vcs, 30)
		consumers := make([]vchannel.Consumer, len(vcs))
		for i, vc := range vcs {
			consumers[i] = vchannel.Consumer{VChannel: vc}
		}
		r := replay(t, w, consumers, vchannel.ReplayOptions{})
		closing := scanner(t, r, vcs[1])
		require.Equal(t, want[vcs[1]][:10], payloads(t, vcs[1], recvN(t, closing, 10)))
		require.NoError(t, closing.Close())
		require.NoError(t, closing.Close())
		<-closing.Done()
		require.NoError(t, closing.Error())
		_, open := <-closing.Chan()
		require.False(t, open)

		rest := map[string][]string{}
		for _, vc := range []string{vcs[0], vcs[2], vcs[3]} {
			rest[vc] = want[vc]
		}
		readAll(t, r, rest)
		for vc := range rest {
			nothingBefore(t, w, scanner(t, r, vc), vc)
		}
		require.Equal(t, 1.0, liveScanners(t, reg, "pch"), "the shared scanner")

		// With every consumer closed, the shared scanner is closed too,
		// with no message to route.
		for vc := range rest {
			require.NoError(t, scanner(t, r, vc).Close())
		}
		require.Eventually(t, func() bool { return liveScanners(t, reg, "pch") == 0 }, watchdog, time.Millisecond,
			"the shared scanner outlived its consumers")
		require.Zero(t, r.Detachments())
	})
}

// liveScanners is the adaptor's count of live scanners of a channel.
func liveScanners(t *testing.T, reg *prometheus.Registry, channel string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var n float64
	for _, f := range families {
		if f.GetName() != "streamwal_scanners" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "channel" && l.GetValue() == channel {
					n += m.GetGauge().GetValue()
				}
			}
		}
	}
	return n
}

// Closing the pchannel ends every consumer, attached or detached, with
// walimpls.ErrClosed, after what each was handed.
func TestWALCloseEndsEveryConsumer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		w := openWAL(t, b.open(t), "pch", adaptor.Options{})
		vcs := vcNames(4)
		want := fill(t, w, vcs, 40)
		consumers := make([]vchannel.Consumer, len(vcs))
		for i, vc := range vcs {
			consumers[i] = vchannel.Consumer{VChannel: vc}
		}
		consumers[0].BufferBytes = 1 << 10
		detached := make(chan string, len(vcs))
		r := replay(t, w, consumers, vchannel.WithDetachHook(vchannel.ReplayOptions{}, func(vc string) { detached <- vc }))
		// vcs[0] never reads until the others are done: it is detached.
		rest := map[string][]string{}
		for _, vc := range vcs[1:] {
			rest[vc] = want[vc]
		}
		readAll(t, r, rest)
		require.Equal(t, vcs[0], <-detached)
		// It reads a little (its queue, maybe its own scanner), then the
		// pchannel closes.
		require.Equal(t, want[vcs[0]][:5], payloads(t, vcs[0], recvN(t, scanner(t, r, vcs[0]), 5)))
		require.NoError(t, w.Close())
		for i, vc := range vcs {
			got, err := drain(t, scanner(t, r, vc))
			require.Error(t, err, "vchannel %s", vc)
			require.ErrorIsf(t, err, walimpls.ErrClosed, "vchannel %s", vc)
			if i == 0 {
				// Whatever it still got continues its sequence.
				require.Equal(t, want[vc][5:5+len(got)], payloads(t, vc, got))
			} else {
				require.Empty(t, got)
			}
		}
		require.NoError(t, r.Close())
	})
}

// A shared scanner that fails ends every attached consumer with its error,
// after what each was handed.
func TestSharedScannerErrorReachesEveryConsumer(t *testing.T) {
	o := backends()[0].open(t) // memory: a truncated position fails the scanner reading it
	// Watermarks often enough for the reader's small reorder budget.
	w := openWAL(t, o, "pch", adaptor.Options{WatermarkBytes: 8 << 10})
	vcs := vcNames(4)
	// Ten times more than every buffer between the log and the consumers
	// can hold (the backend's read-ahead, the adaptor's and the replay's
	// buffers): the shared scanner is still behind the cut when it comes.
	// With 500 per vchannel it had sometimes read it all, and went on
	// waiting at the tail.
	fill(t, w, vcs, 4000)
	ro := openWAL(t, o, "pch", adaptor.Options{ReadOnly: true, ScannerBufferBytes: 64 << 10, MaxMessageBytes: 16 << 10, WatermarkBytes: 8 << 10})
	consumers := make([]vchannel.Consumer, len(vcs))
	for i, vc := range vcs {
		consumers[i] = vchannel.Consumer{VChannel: vc}
	}
	r := replay(t, ro, consumers, vchannel.ReplayOptions{BufferBytes: 4 << 10})
	// Read one message each, so the shared scanner started, then cut the
	// log under it.
	for _, vc := range vcs {
		recvN(t, scanner(t, r, vc), 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	last, err := w.Append(ctx, msg(t, "last").WithVChannel("elsewhere"))
	require.NoError(t, err)
	require.NoError(t, w.Truncate(ctx, last.ID))
	for _, vc := range vcs {
		_, err := drain(t, scanner(t, r, vc))
		// The memory scanner ends with ErrPositionGone. The adaptor reads
		// a backend scanner's Error before its Done and may see nil, and
		// then ends with "backend scanner ended: wal closed" instead (a
		// race in adaptor/scanread.go, reported). A consumer detached
		// while the others drain fails to read from its truncated
		// position with ErrPositionGone.
		require.Truef(t, errors.Is(err, walimpls.ErrPositionGone) || errors.Is(err, walimpls.ErrClosed), "vchannel %s: %v", vc, err)
	}
}

func TestReplayRefusesBadInput(t *testing.T) {
	o := backends()[0].open(t)
	w := openWAL(t, o, "pch", adaptor.Options{})
	want := fill(t, w, []string{"vc"}, 2)
	s, err := view(t, w, "vc").Read(context.Background(), adaptor.ReadOption{})
	require.NoError(t, err)
	got := recvN(t, s, len(want["vc"]))
	require.NoError(t, s.Close())
	cp, err := cursor.CheckpointOf(got[0])
	require.NoError(t, err)

	ctx := context.Background()
	for name, c := range map[string]struct {
		consumers []vchannel.Consumer
		opts      vchannel.ReplayOptions
		is        error
	}{
		"no consumers":             {nil, vchannel.ReplayOptions{}, vchannel.ErrInvalidReplay},
		"twice":                    {[]vchannel.Consumer{{VChannel: "a"}, {VChannel: "a"}}, vchannel.ReplayOptions{}, vchannel.ErrInvalidReplay},
		"bad name":                 {[]vchannel.Consumer{{VChannel: "a b"}}, vchannel.ReplayOptions{}, walimpls.ErrInvalidChannel},
		"empty name":               {[]vchannel.Consumer{{VChannel: ""}}, vchannel.ReplayOptions{}, walimpls.ErrInvalidChannel},
		"no position":              {[]vchannel.Consumer{{VChannel: "a", After: cursor.Checkpoint{TimeTick: 5}}}, vchannel.ReplayOptions{}, vchannel.ErrInvalidReplay},
		"no timetick":              {[]vchannel.Consumer{{VChannel: "a", After: cursor.Checkpoint{Position: cp.Position}}}, vchannel.ReplayOptions{}, vchannel.ErrInvalidReplay},
		"negative budget":          {[]vchannel.Consumer{{VChannel: "a"}}, vchannel.ReplayOptions{BufferBytes: -1}, vchannel.ErrInvalidReplay},
		"another backend":          {[]vchannel.Consumer{{VChannel: "a", After: cp}, {VChannel: "b", After: cursor.Checkpoint{Position: message.NewSeqID("elsewhere", 1), TimeTick: 1}}}, vchannel.ReplayOptions{}, vchannel.ErrInvalidReplay},
		"negative consumer budget": {[]vchannel.Consumer{{VChannel: "a", BufferBytes: -1}}, vchannel.ReplayOptions{}, vchannel.ErrInvalidReplay},
		"another backend2":         {[]vchannel.Consumer{{VChannel: "a", After: cursor.Checkpoint{Position: message.NewSeqID("elsewhere", 1), TimeTick: 1}}}, vchannel.ReplayOptions{}, walimpls.ErrInvalidPosition},
	} {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			_, err := vchannel.Replay(ctx, w, c.consumers, c.opts)
			require.ErrorIs(t, err, c.is)
		})
	}
	// A checkpoint whose position was truncated. (A read-only WAL: the
	// writer's write-ahead buffer still serves the truncated messages.)
	res, err := w.Append(ctx, msg(t, "x"))
	require.NoError(t, err)
	require.NoError(t, w.Truncate(ctx, res.ID))
	ro := openWAL(t, o, "pch", adaptor.Options{ReadOnly: true})
	_, err = vchannel.Replay(ctx, ro, []vchannel.Consumer{{VChannel: "vc", After: cp}}, vchannel.ReplayOptions{})
	require.ErrorIs(t, err, walimpls.ErrPositionGone)

	_, err = vchannel.Replay(ctx, nil, []vchannel.Consumer{{VChannel: "a"}}, vchannel.ReplayOptions{})
	require.ErrorIs(t, err, vchannel.ErrInvalidReplay)

	r := replay(t, w, []vchannel.Consumer{{VChannel: "vc"}}, vchannel.ReplayOptions{})
	_, ok := r.Scanner("unknown")
	require.False(t, ok)
}
