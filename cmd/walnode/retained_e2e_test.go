package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/utility/hlc"
)

// committedAt is a consumer's committed checkpoint as the test knows it:
// the timetick of its last successful commit, and of the one before.
type committedAt struct {
	mu         sync.Mutex
	last, prev uint64
	commits    int
}

func (c *committedAt) note(tt uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tt > c.last {
		c.prev, c.last = c.last, tt
	}
	c.commits++
}

func (c *committedAt) get() (last, prev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, c.prev
}

// retainedSample is one sample of a channel: what its Kafka topics retain
// (end − start offsets of the log partitions), how many topics it has, and
// the consumer's lag: the appends acknowledged after its last commit, and
// after the commit before it.
type retainedSample struct {
	at               time.Time
	retained, topics int64
	lag, lagPrev     int64
	// span is how long ago the commit before the last one's checkpoint
	// was written (its timetick's clock): the time the retained stretch
	// covers.
	span time.Duration
}

// bound is what the sample may retain: see TestKafkaTopicsBounded.
func (s retainedSample) bound() int64 {
	return 2*s.lagPrev + int64(math.Ceil(s.span.Seconds()*otherPerSecond)) + otherSlack
}

// Offsets on a channel's retained stretch that are not acknowledged
// appends (see TestKafkaTopicsBounded): per second of the stretch, and
// besides.
const (
	otherPerSecond = 40
	otherSlack     = 64
)

// TestKafkaTopicsBounded: a cluster keeps its Kafka topics bounded by its
// consumers. Three walnode processes, two channels with an appender each
// and one consumer each that tails the channel and commits where it read
// every 200-500 ms, through a dozen hops (STREAMWAL_RELEASE_HOPS for more):
// planned moves, failovers (SIGKILL) and migrations between the two Kafka
// entries. Every 100 ms a sampler reads the channels' topics on the broker
// and the offsets of their log partitions.
//
// The bound, per channel and sample:
//
//	retained ≤ 2 × lagPrev + 40/s × span + 64
//
// retained is the sum over the channel's topics of end − start offsets of
// the log partition; lagPrev is the appends acknowledged after the
// consumer's commit before its last one, and span how long ago that
// commit's checkpoint was written. Why each term:
//
//   - 2 ×: every append is one transaction of its own here (one sequential
//     appender per channel), which takes two offsets: the record and the
//     commit marker.
//   - lagPrev, not the lag after the last commit: the owner truncates
//     within its commit delay (20 ms) and a round after a commit, so a
//     sample taken right after a commit still sees the log as the commit
//     before left it. A sealed segment is kept whole until the consumer's
//     checkpoint passes it, and was truncated, while it was the last one,
//     up to the commit before the seal: that too is at most lagPrev.
//   - 40/s × span: the offsets on the retained stretch that come with
//     time, not with appends: watermarks, one every 200 ms while appends
//     flow, one per commit through the owner (at most every 200 ms) and
//     one per retention round (one per commit, one a second), two offsets
//     each (32/s), and a term-begin per hop (hops come 0.7 s apart at the
//     closest). Time, not appends: a machine under load appends less in a
//     second, and writes as many watermarks.
//   - 64: the stretch a truncation keeps before the checkpoint (it goes
//     to the checkpoint's resume position, which may precede the
//     consumer's last message), and appends in flight when a hop fences
//     their transactions (aborted records and markers).
//
// Far below what a channel whose log is not released retains: two offsets
// for every append, thousands here.
//
// A hop may leave the log over the bound for a moment: a commit accepted
// by an owner killed before its round is released by the next owner's
// first round or the next commit, and a commit into a segment sealed since
// truncates nothing there (the segment is kept whole until the consumer
// passes its seal, and was last truncated at an earlier commit). So a
// sample may be over the bound only within 2 s (settle) of the last sample
// under it; how many were, and for how long, is logged.
//
// The topics of a channel stay bounded too: a sealed segment's topic is
// deleted once the consumer passes its seal, so a channel never has more
// than its last segment's topic and those of the segments sealed by the
// hops of the last commit intervals (at most 3 here). The figures (median
// and max of retained and of retained / lagPrev, topics) are logged.
func TestKafkaTopicsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs walnode processes through moves, kills and migrations")
	}
	hops := 12
	if v := os.Getenv("STREAMWAL_RELEASE_HOPS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "STREAMWAL_RELEASE_HOPS")
		hops = n
	}
	const (
		channels  = 2
		maxTopics = 3
		// settle bounds how long the log may stay over the bound after a
		// hop (see above).
		settle = 2 * time.Second
	)
	seed := testseed.Seed(t)
	r := rand.New(rand.NewPCG(seed, 0))
	start := time.Now()
	e := newReleaseEnv(t, 3, channels, time.Second)
	snap := e.waitAssigned(channels)
	var names []string
	for ch := range snap.Assignments {
		names = append(names, ch)
	}
	slices.Sort(names)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(2+hops/6)*time.Minute)
	defer cancel()

	var (
		wg      sync.WaitGroup
		fails   = make(chan error, 16)
		stop    = make(chan struct{})
		chans   = map[string]*relChannel{}
		commits = map[string]*committedAt{}
		samples = map[string][]retainedSample{}
		smu     sync.Mutex
	)
	fail := func(err error) {
		select {
		case fails <- err:
		default:
		}
	}
	flusher := relConsumer{name: "flusher"}
	for i, ch := range names {
		c := &relChannel{name: ch, cps: map[string]string{}}
		chans[ch], commits[ch] = c, &committedAt{}
		wg.Add(3)
		go func() {
			defer wg.Done()
			c.appender(e.cli, rand.New(rand.NewPCG(seed, uint64(i+1))), stop, 10*time.Millisecond, fails)
		}()
		// The consumer: it tails the channel, and commits where it read
		// every 200-500 ms.
		var (
			mu     sync.Mutex
			latest string
		)
		rctx, rcancel := context.WithCancel(ctx)
		go func() {
			defer wg.Done()
			err := e.cli.Read(rctx, ch, client.ReadOptions{}, func(d *streamwalv1.Delivered) error {
				mu.Lock()
				latest = d.GetCheckpoint()
				mu.Unlock()
				return nil
			})
			if err != nil && rctx.Err() == nil {
				fail(fmt.Errorf("%s: the consumer's read: %w", ch, err))
			}
		}()
		go func() {
			defer wg.Done()
			defer rcancel()
			cr := rand.New(rand.NewPCG(seed, uint64(100+i)))
			for {
				// The commit interval: a duration the test means.
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(200+cr.IntN(300)) * time.Millisecond):
				}
				mu.Lock()
				cp := latest
				mu.Unlock()
				if cp == "" {
					continue
				}
				res, refused, err := e.commit(ctx, ch, flusher, cp)
				switch {
				case err != nil:
					fail(fmt.Errorf("%s: commit %s: %w", ch, cp, err))
					return
				case refused != nil:
					fail(fmt.Errorf("%s: commit %s refused: %s", ch, cp, refused.GetReason()))
					return
				}
				tt, err := parseTT(res.GetCheckpoint())
				if err != nil {
					fail(err)
					return
				}
				commits[ch].note(tt)
			}
		}()
	}
	// The sampler.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond): // the sampling period
			}
			lags := map[string][2]int64{}
			spans := map[string]time.Duration{}
			for _, ch := range names {
				last, prev := commits[ch].get()
				if last == 0 || prev == 0 {
					continue
				}
				spans[ch] = time.Since(hlc.Physical(prev))
				var lag, lagPrev int64
				for _, a := range chans[ch].snapshot() {
					if a.tt > last {
						lag++
					}
					if a.tt > prev {
						lagPrev++
					}
				}
				lags[ch] = [2]int64{lag, lagPrev}
			}
			topics, err := e.listTopics(ctx)
			if err != nil {
				fail(err)
				return
			}
			for _, ch := range names {
				l, ok := lags[ch]
				if !ok {
					continue
				}
				var ts []string
				for _, name := range channelTopics(topics, ch) {
					ts = append(ts, name)
				}
				starts, err := e.adm.ListStartOffsets(ctx, ts...)
				if err != nil {
					fail(err)
					return
				}
				ends, err := e.adm.ListEndOffsets(ctx, ts...)
				if err != nil {
					fail(err)
					return
				}
				var retained, n int64
				for _, name := range ts {
					s, sok := starts.Lookup(name, 0)
					en, eok := ends.Lookup(name, 0)
					if !sok || !eok || s.Err != nil || en.Err != nil {
						continue // deleted meanwhile
					}
					retained += en.Offset - s.Offset
					n++
				}
				smu.Lock()
				samples[ch] = append(samples[ch], retainedSample{at: time.Now(), retained: retained, topics: n, lag: l[0], lagPrev: l[1], span: spans[ch]})
				smu.Unlock()
			}
		}
	}()
	noFailure := func() {
		select {
		case err := <-fails:
			require.NoError(t, err)
		default:
		}
	}

	kinds := map[string]int{}
	for k := range hops {
		// The time between hops: a duration the test means.
		select {
		case <-time.After(time.Duration(700+r.IntN(800)) * time.Millisecond):
		case err := <-fails:
			require.NoError(t, err)
		}
		ch := names[r.IntN(len(names))]
		s, _ := e.view.Snapshot()
		owner := s.Assignments[ch].Value.Node
		kind := []string{"move", "failover", "migrate"}[r.IntN(3)]
		began := time.Now()
		switch kind {
		case "move":
			var to []string
			for id := range e.nodes {
				if id != owner {
					to = append(to, id)
				}
			}
			slices.Sort(to)
			require.True(t, e.moveTo(ctx, ch, to[r.IntN(len(to))]))
		case "failover":
			e.kill9(ctx, owner)
		case "migrate":
			cur, err := e.chains.Get(ctx, ch)
			require.NoError(t, err)
			dest := entryB
			if cur.Last().Backend.Name == entryB {
				dest = entryA
			}
			e.migrate(ctx, ch, dest)
			e.waitMigrated(ctx, e.chains, ch, dest)
		}
		kinds[kind]++
		t.Logf("hop %d: %s of %s (owner %s) in %s", k, kind, ch, owner, time.Since(began).Round(time.Millisecond))
		noFailure()
	}
	close(stop)
	wg.Wait()
	noFailure()

	for _, ch := range names {
		ss := samples[ch]
		require.NotEmpty(t, ss, "%s: no sample", ch)
		var retained, ratios []float64
		var maxTopicsSeen, maxExcess, over int64
		var longest time.Duration
		var runFrom time.Time // the last sample within the bound
		for i, s := range ss {
			require.LessOrEqualf(t, s.topics, int64(maxTopics), "%s, sample %d: %d topics", ch, i, s.topics)
			if s.retained <= s.bound() {
				runFrom = s.at
			} else {
				over++
				if runFrom.IsZero() {
					runFrom = s.at
				}
				longest = max(longest, s.at.Sub(runFrom))
				require.LessOrEqualf(t, s.at.Sub(runFrom), settle, "%s, sample %d of %d: %d offsets retained, the consumer %d appends behind its commit before last (%d behind its last), which was %s ago: over 2 × %d + %d, and for %s",
					ch, i, len(ss), s.retained, s.lagPrev, s.lag, s.span.Round(time.Millisecond), s.lagPrev, s.bound()-2*s.lagPrev, s.at.Sub(runFrom).Round(time.Millisecond))
			}
			maxExcess = max(maxExcess, s.retained-2*s.lagPrev)
			retained = append(retained, float64(s.retained))
			if s.lagPrev > 0 {
				ratios = append(ratios, float64(s.retained)/float64(s.lagPrev))
			}
			maxTopicsSeen = max(maxTopicsSeen, s.topics)
		}
		slices.Sort(retained)
		slices.Sort(ratios)
		med := func(xs []float64) float64 { return xs[len(xs)/2] }
		t.Logf("%s: %d samples, %d commits, %d appends: retained offsets median %.0f max %.0f; retained / lag before the last commit median %.2f max %.2f, retained - 2 × that lag max %d; over the bound %d samples (%.1f%%), for %s at the longest; topics max %d",
			ch, len(ss), commits[ch].commits, len(chans[ch].acks), med(retained), retained[len(retained)-1], med(ratios), ratios[len(ratios)-1],
			maxExcess, over, 100*float64(over)/float64(len(ss)), longest.Round(time.Millisecond), maxTopicsSeen)
	}
	t.Logf("seed %d: %d hops %v in %s", seed, hops, kinds, time.Since(start).Round(time.Second))
}
