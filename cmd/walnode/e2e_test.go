package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/utility/backoff"
)

// childArgsEnv holds, as a JSON array, the flags a child of this test binary
// runs walnode with.
const childArgsEnv = "WALNODE_E2E_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childArgsEnv); args != "" {
		os.Exit(childMain(args))
	}
	goleak.VerifyTestMain(m)
}

// childMain runs walnode in a child process until SIGTERM (or SIGKILL).
func childMain(args string) int {
	var flags []string
	if err := json.Unmarshal([]byte(args), &flags); err != nil {
		fmt.Fprintln(os.Stderr, "bad child args:", err)
		return 2
	}
	p, logger, err := parseFlags(flags)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signalContext()
	defer stop()
	if err := run(ctx, p, logger); err != nil {
		logger.Error("walnode failed", "error", err)
		return 1
	}
	return 0
}

func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
	go func() {
		select {
		case <-ch:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// child is one walnode process of a test cluster.
type child struct {
	id   string
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

type e2eCluster struct {
	t       *testing.T
	root    string
	etcd    []string
	brokers []string
	dir     string
	nodes   map[string]*child
	cli     *client.Client
	view    *cluster.View
	ecli    *clientv3.Client
}

func newE2ECluster(t *testing.T, n int, ttl time.Duration) *e2eCluster {
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	require.NoError(t, err)
	t.Cleanup(broker.Close)
	c := newE2EClusterWith(t, n, ttl, func(string) []string { return []string{"-kafka", strings.Join(broker.ListenAddrs(), ",")} })
	c.brokers = broker.ListenAddrs()
	return c
}

// newE2EClusterWith starts n walnode processes on one etcd, each with the
// backend flags backend gives for its ID, and a client.
func newE2EClusterWith(t *testing.T, n int, ttl time.Duration, backend func(id string) []string) *e2eCluster {
	srv := etcdtest.Start(t)
	c := &e2eCluster{t: t, root: etcdtest.Prefix(t) + "cluster/", etcd: srv.Endpoints(), dir: t.TempDir(), nodes: map[string]*child{}}
	for i := 1; i <= n; i++ {
		id := "n" + strconv.Itoa(i)
		c.nodes[id] = &child{id: id, log: filepath.Join(c.dir, id+".log"), args: append([]string{
			"-id", id, "-listen", "127.0.0.1:0", "-etcd", strings.Join(c.etcd, ","),
			"-root", c.root, "-session-ttl", ttl.String(), "-data", filepath.Join(c.dir, id), "-shutdown-timeout", "10s",
			"-log-level", "debug",
		}, backend(id)...)}
		c.start(id)
	}
	ecli := etcdtest.Client(t, c.etcd)
	c.ecli = ecli
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	c.cli, err = client.New(ctx, client.Config{Etcd: ecli, Root: c.root, Retry: backoff.Config{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(c.cli.Close)
	c.view = c.cli.View()
	t.Cleanup(func() {
		for id := range c.nodes {
			c.stop(id, syscall.SIGTERM)
		}
		if t.Failed() {
			c.dumpLogs()
		}
	})
	return c
}

func (c *e2eCluster) start(id string) {
	ch := c.nodes[id]
	args, _ := json.Marshal(ch.args)
	f, err := os.OpenFile(ch.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(c.t, err)
	fmt.Fprintf(f, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(args))
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(c.t, cmd.Start())
	ch.cmd, ch.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(ch.done)
	}()
}

// stop signals a node and waits for its process to end.
func (c *e2eCluster) stop(id string, sig syscall.Signal) {
	ch := c.nodes[id]
	if ch.cmd == nil {
		return
	}
	select {
	case <-ch.done:
	default:
		_ = ch.cmd.Process.Signal(sig)
		select {
		case <-ch.done:
		case <-time.After(30 * time.Second):
			_ = ch.cmd.Process.Kill()
			<-ch.done
		}
	}
	ch.cmd = nil
}

func (c *e2eCluster) dumpLogs() {
	for _, ch := range c.nodes {
		data, _ := os.ReadFile(ch.log)
		lines := strings.Split(string(data), "\n")
		if len(lines) > 80 {
			lines = lines[len(lines)-80:]
		}
		c.t.Logf("---- %s log (last lines):\n%s", ch.id, strings.Join(lines, "\n"))
	}
}

// waitAssigned waits until every one of n channels is assigned to a live
// node and confirmed.
func (c *e2eCluster) waitAssigned(n int) cluster.Snapshot {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		if len(s.Assignments) < n {
			return false
		}
		for ch, a := range s.Assignments {
			if _, _, live := s.Owner(ch); !live || a.Value.State != cluster.Assigned {
				return false
			}
		}
		return true
	})
	require.NoError(c.t, err, "channels never all assigned")
	return s
}

// ensureOwns makes node own a channel, when it owns none, by a planned move
// of one from the node that owns the most, and waits until node serves it.
func (c *e2eCluster) ensureOwns(ctx context.Context, node string) {
	t := c.t
	s, _ := c.view.Snapshot()
	count := map[string]int{}
	for _, a := range s.Assignments {
		count[a.Value.Node]++
	}
	if count[node] > 0 {
		return
	}
	var pick string
	for _, ch := range slices.Sorted(maps.Keys(s.Assignments)) {
		if pick == "" || count[s.Assignments[ch].Value.Node] > count[s.Assignments[pick].Value.Node] {
			pick = ch
		}
	}
	require.NotEmpty(t, pick, "no channel to move")
	layout, err := cluster.NewLayout(c.root)
	require.NoError(t, err)
	_, err = c.ecli.Put(ctx, layout.Move(pick), string(cluster.Encode(cluster.MoveRequest{To: node})))
	require.NoError(t, err)
	_, err = c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		a := s.Assignments[pick].Value
		return a.Node == node && a.State == cluster.Assigned
	})
	require.NoErrorf(t, err, "%s never moved to %s", pick, node)
}

// ack is one acknowledged append.
type ack struct {
	at   time.Time
	term int64
	node string // the node that answered
}

// Three walnode processes on one etcd and one Kafka, appenders through the
// client on every channel, and a node killed with SIGKILL a dozen times
// (STREAMWAL_E2E_KILLS for more) at random moments (and restarted): every acknowledged append is read back
// exactly once and in order, and the failover time - from the kill to the
// first append acknowledged by the new owner - is reported, with each
// move's phases (see movePhases). At least one move must have been made by
// failure detection, before the lease expired (Assignment.Detected set);
// the figures are printed, not asserted: a loaded machine may take longer.
func TestKillNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three walnode processes through a dozen SIGKILLs")
	}
	const (
		ttl      = time.Second
		channels = 6
	)
	// Twelve kills in make test (about 36 channel moves) keep the suite
	// within its time on a 2-core machine; the failover figures of the
	// README come from runs of 20 or more: STREAMWAL_E2E_KILLS=20.
	kills := 12
	if v := os.Getenv("STREAMWAL_E2E_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "STREAMWAL_E2E_KILLS")
		kills = n
	}
	c := newE2ECluster(t, 3, ttl)
	snap := c.waitAssigned(channels)
	names := slices.Sorted(func(yield func(string) bool) {
		for ch := range snap.Assignments {
			if !yield(ch) {
				return
			}
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu    sync.Mutex
		acks  = map[string][]ack{}    // per channel, in order
		acked = map[string][]string{} // per channel, payloads in order
		wg    sync.WaitGroup
		fails = make(chan error, channels)
	)
	for _, ch := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				p := fmt.Sprintf("%s-%06d", ch, i)
				actx, acancel := context.WithTimeout(ctx, 60*time.Second)
				r, err := c.cli.Append(actx, ch, client.Message{Payload: []byte(p)}, client.Options{})
				acancel()
				if err != nil {
					if ctx.Err() == nil {
						fails <- fmt.Errorf("%s: %w", p, err)
					}
					return
				}
				mu.Lock()
				acks[ch] = append(acks[ch], ack{at: time.Now(), term: r.Term})
				acked[ch] = append(acked[ch], p)
				mu.Unlock()
			}
		}()
	}
	// The first acknowledged append of ch with a term above term, after at.
	firstAckAbove := func(ch string, term int64, at time.Time) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range acks[ch] {
			if a.term > term && !a.at.Before(at) {
				return a.at, true
			}
		}
		return time.Time{}, false
	}

	r := rand.New(rand.NewPCG(1, 2))
	var failovers []time.Duration
	var phases []movePhases
	for k := range kills {
		// A random moment for the kill, not a wait for anything: the
		// checks hold whatever the appenders got done by then.
		time.Sleep(time.Duration(100+r.IntN(700)) * time.Millisecond)
		s, _ := c.view.Snapshot()
		owned := map[string][]string{}
		for ch, a := range s.Assignments {
			owned[a.Value.Node] = append(owned[a.Value.Node], ch)
		}
		var victims []string
		for id := range c.nodes {
			if len(owned[id]) > 0 {
				victims = append(victims, id)
			}
		}
		slices.Sort(victims)
		victim := victims[r.IntN(len(victims))]
		lost := map[string]int64{}
		for _, ch := range owned[victim] {
			lost[ch] = s.Assignments[ch].Value.Term
		}
		leader := c.leader()
		killed := time.Now()
		c.stop(victim, syscall.SIGKILL)
		for ch, term := range lost {
			var first time.Time
			require.Eventuallyf(t, func() bool {
				var ok bool
				first, ok = firstAckAbove(ch, term, killed)
				return ok
			}, 90*time.Second, 5*time.Millisecond, "kill %d: channel %s of %s never acknowledged an append at a term above %d", k, ch, victim, term)
			failovers = append(failovers, first.Sub(killed))
			p := c.phasesOf(ch, term+1, killed, first)
			p.leader = victim == leader
			phases = append(phases, p)
		}
		// Restarted, and registered before the next kill: each kill
		// meets a cluster of three, not a process still starting.
		before := s.Nodes[victim].Revision
		c.start(victim)
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		_, err := c.view.WaitFor(wctx, func(s cluster.Snapshot) bool {
			n, ok := s.Nodes[victim]
			return ok && n.Revision > before
		})
		wcancel()
		require.NoError(t, err, "kill %d: %s never registered again", k, victim)
	}
	cancel()
	wg.Wait()
	close(fails)
	for err := range fails {
		require.NoError(t, err)
	}

	slices.Sort(failovers)
	pct := func(p float64) time.Duration { return failovers[int(p*float64(len(failovers)-1))] }
	t.Logf("failover (kill → first append acknowledged by the new owner) over %d channel moves: p50 %s, p99 %s, max %s (lease TTL %s)",
		len(failovers), pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), failovers[len(failovers)-1].Round(time.Millisecond), ttl)
	detected := reportPhases(t, phases)
	require.Positive(t, detected, "no move was made by failure detection: every one waited for the lease")

	// Every acknowledged append exactly once, in order.
	c.waitAssigned(channels)
	for _, ch := range names {
		mu.Lock()
		want := slices.Clone(acked[ch])
		mu.Unlock()
		got := c.readAll(ch, want)
		require.Equalf(t, want, got, "channel %s: acknowledged appends read back", ch)
	}
}

// movePhases times one move of a killed owner's channel, on the machine's
// clock (every process runs here): detect is the kill to the leader's
// confirmation that the process is gone (Assignment.Detected), decide from
// there to the new owner seeing its assignment (Opened.Seen: the pass, the
// write, the watch), fence the backend's open at the new term
// (Opened.Fenced), tail the rest of the WAL's open (Opened.Ready: the end
// of the log found, the term-begin written), first append from there to
// the first append acknowledged at the new term (the client's answer).
type movePhases struct {
	total, detect, decide, fence, tail, firstAppend time.Duration
	// byLease: the move waited for the lease (no Detected): the phases
	// before fence are unknown.
	byLease bool
	// noReport: the new owner's Opened report was not seen (the channel
	// moved on meanwhile): only the total is known.
	noReport bool
	// leader: the killed owner was the coordinators' leader too: another
	// candidate took over before moving its channels.
	leader bool
}

// leader returns the ID of the coordinator that leads (the oldest
// election key), or "".
func (c *e2eCluster) leader() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	layout, err := cluster.NewLayout(c.root)
	require.NoError(c.t, err)
	resp, err := c.ecli.Get(ctx, layout.Election()+"/", clientv3.WithFirstCreate()...)
	require.NoError(c.t, err)
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// phasesOf reads the move of ch to term from the cluster: its assignment
// and its new owner's Opened report, waiting (bounded) for the report.
func (c *e2eCluster) phasesOf(ch string, term int64, killed, first time.Time) movePhases {
	p := movePhases{total: first.Sub(killed)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		a, o := s.Assignments[ch].Value, s.Opened[ch].Value
		return a.Term != term || (o.Node == a.Node && o.Term == term && !o.Ready.IsZero())
	})
	a, o := s.Assignments[ch].Value, s.Opened[ch].Value
	if err != nil || a.Term != term {
		p.noReport = true
		return p
	}
	p.fence, p.tail, p.firstAppend = o.Fenced.Sub(o.Seen), o.Ready.Sub(o.Fenced), first.Sub(o.Ready)
	if a.Detected.IsZero() {
		p.byLease = true
		return p
	}
	p.detect, p.decide = a.Detected.Sub(killed), o.Seen.Sub(a.Detected)
	return p
}

// reportPhases logs p50 and p99 of each phase over the moves made by
// detection, and how many waited for the lease; it returns the number made
// by detection.
func reportPhases(t *testing.T, moves []movePhases) int {
	var byLease, noReport int
	cols := map[string][]time.Duration{}
	names := []string{"detect", "  owner led", "  owner did not", "decide", "fence/open", "find tail", "first append", "total"}
	for _, m := range moves {
		switch {
		case m.noReport:
			noReport++
			continue
		case m.byLease:
			byLease++
			continue
		}
		for i, d := range []time.Duration{m.detect, m.decide, m.fence, m.tail, m.firstAppend, m.total} {
			name := names[i+2*min(i, 1)]
			cols[name] = append(cols[name], d)
		}
		if m.leader {
			cols[names[1]] = append(cols[names[1]], m.detect)
		} else {
			cols[names[2]] = append(cols[names[2]], m.detect)
		}
	}
	detected := len(moves) - byLease - noReport
	t.Logf("moves by failure detection: %d of %d (by the lease: %d, without an open report: %d)", detected, len(moves), byLease, noReport)
	for _, name := range names {
		ds := cols[name]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(100 * time.Microsecond) }
		t.Logf("  %-15s p50 %8s  p99 %8s  max %8s  (%d)", name, q(0.5), q(0.99), ds[len(ds)-1].Round(100*time.Microsecond), len(ds))
	}
	return detected
}

// readAll reads ch from the start until every payload of want was read and
// returns the payloads read (payloads of appends that ended without an
// answer may follow the last acknowledged one and are dropped).
// appendTagged appends n messages tag-0 … tag-(n-1) to ch, one at a time,
// each acknowledged, and returns their payloads.
func (c *e2eCluster) appendTagged(ctx context.Context, ch, tag string, n int) []string {
	c.t.Helper()
	var acked []string
	for i := range n {
		p := fmt.Sprintf("%s-%d", tag, i)
		_, err := c.cli.Append(ctx, ch, client.Message{Payload: []byte(p)}, client.Options{})
		require.NoError(c.t, err, "append %s", p)
		acked = append(acked, p)
	}
	return acked
}

func (c *e2eCluster) readAll(ch string, want []string) []string {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []string
	seen := map[string]bool{}
	err := c.cli.Read(ctx, ch, client.ReadOptions{}, func(d *streamwalv1.Delivered) error {
		p := string(d.GetPayload())
		require.Falsef(t, seen[p], "channel %s: %s delivered twice", ch, p)
		seen[p] = true
		got = append(got, p)
		if len(want) == 0 || p == want[len(want)-1] {
			cancel()
		}
		return nil
	})
	require.NoError(t, err)
	// Drop what came after the last acknowledged append: unanswered ones.
	if i := slices.Index(got, want[len(want)-1]); i >= 0 {
		got = got[:i+1]
	}
	// Unacknowledged appends in the middle would break the order check;
	// there are none: each channel has one sequential appender that only
	// gives up at the end.
	return got
}

// A partitioned owner: a node is stopped (SIGSTOP) until its lease expires
// and its channel moves, then continued. Appends sent straight to it for
// the channel it lost are never acknowledged, and it drops the channel.
func TestPartitionedOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three walnode processes")
	}
	c := newE2ECluster(t, 3, time.Second)
	snap := c.waitAssigned(6)
	var ch, victim string
	var term int64
	for name, a := range snap.Assignments {
		ch, victim, term = name, a.Value.Node, a.Value.Term
		break
	}
	addr := snap.Nodes[victim].Value.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := c.cli.Append(ctx, ch, client.Message{Payload: []byte("before")}, client.Options{})
	require.NoError(t, err)

	proc := c.nodes[victim].cmd.Process
	require.NoError(t, proc.Signal(syscall.SIGSTOP))
	_, err = c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		a, ok := s.Assignments[ch]
		return ok && a.Value.Node != victim && a.Value.Term > term && a.Value.State == cluster.Assigned
	})
	require.NoError(t, err, "the stopped owner's channel never moved")
	r, err := c.cli.Append(ctx, ch, client.Message{Payload: []byte("on the new owner")}, client.Options{})
	require.NoError(t, err)
	require.Greater(t, r.Term, term)
	require.NoError(t, proc.Signal(syscall.SIGCONT))

	// Straight to the old owner, bypassing the client's owner lookup: no
	// append is acknowledged, until (and after) it drops the channel.
	raw := streamwalv1connect.NewWALServiceClient(http.DefaultClient, "http://"+addr)
	dropped := false
	for i := 0; !dropped; i++ {
		_, err := raw.Append(ctx, connect.NewRequest(&streamwalv1.AppendRequest{Channel: ch,
			Message: &streamwalv1.Message{Payload: []byte(fmt.Sprintf("stale-%d", i))}}))
		require.Errorf(t, err, "the old owner acknowledged append %d of a channel it lost", i)
		st, serr := raw.Status(ctx, connect.NewRequest(&streamwalv1.StatusRequest{}))
		if serr == nil {
			dropped = true
			for _, cs := range st.Msg.GetChannels() {
				if cs.GetName() == ch && cs.GetState() == "available" {
					dropped = false
				}
			}
		}
		require.NoError(t, ctx.Err(), "the old owner never dropped the channel")
	}
	// A marker after all of it: nothing the old owner was sent is read
	// before it.
	_, err = c.cli.Append(ctx, ch, client.Message{Payload: []byte("marker")}, client.Options{})
	require.NoError(t, err)
	want := []string{"before", "on the new owner", "marker"}
	got := c.readAll(ch, want)
	require.Equal(t, want, got, "nothing sent to the old owner after the move is delivered")
}

// SIGTERM is a graceful shutdown: the node drains, closes its WALs and
// revokes its lease, so its channels move at once - well before its lease
// (10 s here) would have expired - and nothing acknowledged is lost.
func TestGracefulShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three walnode processes")
	}
	const ttl = 10 * time.Second
	c := newE2ECluster(t, 3, ttl)
	snap := c.waitAssigned(6)
	var victim string
	lost := map[string]int64{}
	for ch, a := range snap.Assignments {
		if victim == "" || a.Value.Node == victim {
			victim = a.Value.Node
			lost[ch] = a.Value.Term
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ch := range lost {
		_, err := c.cli.Append(ctx, ch, client.Message{Payload: []byte("before-" + ch)}, client.Options{})
		require.NoError(t, err)
	}
	start := time.Now()
	c.stop(victim, syscall.SIGTERM)
	_, err := c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		for ch, term := range lost {
			a := s.Assignments[ch].Value
			if a.Node == victim || a.Term <= term {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	moved := time.Since(start)
	t.Logf("SIGTERM of %s: its %d channels moved after %s (lease TTL %s)", victim, len(lost), moved.Round(time.Millisecond), ttl)
	require.Lessf(t, moved, ttl, "the channels moved only when the lease expired: the shutdown did not revoke it")
	for ch := range lost {
		_, err := c.cli.Append(ctx, ch, client.Message{Payload: []byte("after-" + ch)}, client.Options{})
		require.NoError(t, err)
		require.Equal(t, []string{"before-" + ch, "after-" + ch}, c.readAll(ch, []string{"before-" + ch, "after-" + ch}))
	}
}

// A stalled owner (SIGSTOP, as a long GC pause or a starved process would
// be) keeps its channels when the stall is shorter than its lease: its
// connections stay open and its kernel still answers, so failure
// detection has nothing that proves it dead. First an owner that does not
// lead, then the leader (also an owner: the candidate behind it watches
// it), each stopped for 2 s at a 6 s lease TTL while appends to its
// channels wait: they are acknowledged at the same terms once it runs
// again, no assignment changed (read from etcd after the stall), and no
// coordinator counted a death or a silence (the nodes heartbeat: a stall
// shorter than the TTL is not one).
func TestStalledOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three walnode processes")
	}
	const (
		ttl   = 6 * time.Second
		stall = 2 * time.Second
	)
	c := newE2ECluster(t, 3, ttl)
	c.waitAssigned(6)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ecli := c.ecli
	layout, err := cluster.NewLayout(c.root)
	require.NoError(t, err)

	// Detection is armed: the leader holds a stream to every node.
	leader := c.waitMetric(ctx, func(m map[string]float64) bool {
		return m["streamwal_coordinator_leader"] == 1 && m["streamwal_coordinator_liveness_streams"] == 3
	})
	// Both victims must own a channel: a node that registered well before
	// the others got them all.
	var follower string
	for id := range c.nodes {
		if id != leader {
			follower = id
			break
		}
	}
	c.ensureOwns(ctx, leader)
	c.ensureOwns(ctx, follower)

	for _, victim := range []string{follower, leader} {
		before, err := cluster.Load(ctx, ecli, layout, nil)
		require.NoError(t, err)
		owned := map[string]int64{}
		for ch, a := range before.Assignments {
			if a.Value.Node == victim {
				owned[ch] = a.Value.Term
			}
		}
		require.NotEmpty(t, owned, "%s owns no channel", victim)
		proc := c.nodes[victim].cmd.Process
		require.NoError(t, proc.Signal(syscall.SIGSTOP))
		stopped := time.Now()
		results := make(chan error, len(owned))
		for ch, term := range owned {
			go func() {
				r, err := c.cli.Append(ctx, ch, client.Message{Payload: []byte("during the stall")}, client.Options{})
				if err == nil && (r.Term != term || r.Node != victim) {
					err = fmt.Errorf("%s: acknowledged by %s at term %d, not by %s at %d", ch, r.Node, r.Term, victim, term)
				}
				results <- err
			}()
		}
		// The stall itself: a duration, not a wait for anything.
		time.Sleep(stall - time.Since(stopped))
		require.NoError(t, proc.Signal(syscall.SIGCONT))
		for range owned {
			require.NoError(t, <-results)
		}
		after, err := cluster.Load(ctx, ecli, layout, nil)
		require.NoError(t, err)
		for ch := range before.Assignments {
			require.Equal(t, before.Assignments[ch].Value, after.Assignments[ch].Value, "%s: a stall of %s (TTL %s) moved it", ch, stall, ttl)
		}
		t.Logf("%s stopped for %s (lease TTL %s): its %d channels stayed, appends waiting meanwhile acknowledged at the same terms",
			victim, stall, ttl, len(owned))
	}
	for id := range c.nodes {
		m := c.metrics(ctx, id)
		require.Zero(t, m["streamwal_coordinator_dead_nodes_total"], "%s counted a death", id)
		require.Zero(t, m["streamwal_coordinator_dead_candidates_total"], "%s deleted a candidate's key", id)
		silent, ok := m[`streamwal_coordinator_silent_nodes_total{outcome="silent"}`]
		require.True(t, ok, "%s: no silence metric", id)
		require.Zero(t, silent, "%s found a node silent for its lease", id)
	}
}

// metrics scrapes a node's /metrics: each series (name and labels as
// printed) to its value.
func (c *e2eCluster) metrics(ctx context.Context, id string) map[string]float64 {
	s, _ := c.view.Snapshot()
	out := map[string]float64{}
	n, ok := s.Nodes[id]
	if !ok {
		return out
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.Value.Addr+"/metrics", nil)
	require.NoError(c.t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// waitMetric waits until a node's metrics satisfy cond and returns its ID
// (polled every 20ms until ctx ends: a condition, not a bound).
func (c *e2eCluster) waitMetric(ctx context.Context, cond func(map[string]float64) bool) string {
	for {
		for id := range c.nodes {
			if cond(c.metrics(ctx, id)) {
				return id
			}
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("no node's metrics ever satisfied the condition: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
