package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

const (
	crashChildEnv  = "STREAMWAL_LOCAL_CRASH_CHILD"
	crashTermEnv   = "STREAMWAL_LOCAL_CRASH_TERM"
	crashSeedEnv   = "STREAMWAL_LOCAL_CRASH_SEED" // the child's randomness, drawn by the parent
	crashChannel   = "crash"
	crashMaxRecord = 64 << 10
)

func crashConfig(dir string) Config {
	return Config{Dir: dir, SegmentBytes: 1 << 20, MaxMessageBytes: 128 << 10, Sync: SyncAlways}
}

// crashPayload is the deterministic content of the record with this seed,
// so the parent can check every record it reads back.
func crashPayload(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, r.IntN(crashMaxRecord+1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func crashMessage(seed uint64) message.Message {
	m, _ := message.New(crashPayload(seed), map[string]string{"seed": strconv.FormatUint(seed, 10)})
	return m
}

// crashBatch makes a batch of n messages tagged for checkBatches, with
// random seeds.
func crashBatch(r *rand.Rand, tag string, n int) ([]message.Message, []uint64) {
	msgs, seeds := make([]message.Message, n), make([]uint64, n)
	for i := range msgs {
		seeds[i] = r.Uint64()
		msgs[i], _ = message.New(crashPayload(seeds[i]), map[string]string{
			"seed": strconv.FormatUint(seeds[i], 10), "batch": tag, "i": strconv.Itoa(i), "n": strconv.Itoa(n),
		})
	}
	return msgs, seeds
}

// crashChild is the process the crash test kills: it appends with four
// goroutines until it dies, half of the time single messages, half of the
// time batches of 2 to 6, printing each acknowledged ID after the
// acknowledgement.
func crashChild(dir string) int {
	term, _ := strconv.ParseInt(os.Getenv(crashTermEnv), 10, 64)
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	s, err := New(context.Background(), crashConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	w, err := s.Open(context.Background(), walimpls.Channel{Name: crashChannel, Term: term})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open channel:", err)
		return 1
	}
	var mu sync.Mutex
	fmt.Fprintf(os.Stdout, "ready %d\n", os.Getpid())
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			for k := 0; ; k++ {
				var (
					ids   []message.ID
					seeds []uint64
					err   error
				)
				if r.IntN(2) == 0 {
					seeds = []uint64{r.Uint64()}
					var id message.ID
					id, err = walimpls.Append(context.Background(), w, crashMessage(seeds[0]))
					ids = []message.ID{id}
				} else {
					var msgs []message.Message
					msgs, seeds = crashBatch(r, fmt.Sprintf("%d-%d-%d", term, g, k), 2+r.IntN(5))
					ids, err = w.AppendBatch(context.Background(), msgs)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(1)
				}
				mu.Lock()
				for i, id := range ids {
					// One write per line: atomic on a pipe.
					_, _ = os.Stdout.WriteString("ack " + id.Marshal() + " " + strconv.FormatUint(seeds[i], 10) + "\n")
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return 0
}

// TestCrashRecovery SIGKILLs a child process that appends single messages
// and batches, twenty times: every acknowledged message is read back
// intact, every batch (acknowledged or not) is whole, and appends go on
// above every earlier ID.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test re-executes the test binary")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 1))
	const rounds = 20
	var lastID message.ID
	totalAcked, totalDropped, batches := 0, int64(0), 0
	for round := 1; round <= rounds; round++ {
		acked := crashRound(t, dir, int64(round), round == 1, rng.Uint64(), time.Duration(5+rng.IntN(75))*time.Millisecond)
		totalAcked += len(acked)

		s, err := New(context.Background(), crashConfig(dir))
		require.NoError(t, err, "round %d: reopen", round)
		totalDropped += s.Recovery().DroppedBytes
		w, err := s.Open(context.Background(), walimpls.Channel{Name: crashChannel, Term: int64(round)})
		require.NoError(t, err)
		// Appends continue after recovery, with larger IDs than any before.
		// That message also marks the end of what to read back.
		id, err := walimpls.Append(context.Background(), w, crashMessage(rng.Uint64()))
		require.NoError(t, err, "round %d: append after recovery", round)
		if !lastID.IsZero() {
			require.True(t, lastID.LT(id), "round %d: id %s not above %s", round, id, lastID)
		}
		lastID = id
		got := readUntil(t, w, id)
		// Every batch is whole, acknowledged or not.
		batches += len(checkBatches(t, got, fmt.Sprintf("round %d", round)))
		seen := map[string]bool{}
		for i, m := range got {
			if i > 0 {
				require.True(t, got[i-1].ID().LT(m.ID()), "round %d: ids out of order", round)
			}
			seedStr, ok := m.Properties().Get("seed")
			require.True(t, ok, "round %d: message %s without seed", round, m.ID())
			seed, err := strconv.ParseUint(seedStr, 10, 64)
			require.NoError(t, err)
			require.Truef(t, bytes.Equal(crashPayload(seed), m.Payload()), "round %d: message %s is corrupt", round, m.ID())
			seen[m.ID().Marshal()] = true
		}
		for id, seed := range acked {
			require.Truef(t, seen[id], "round %d: acknowledged message %s (seed %d) lost", round, id, seed)
		}
		// Keep the directory small: drop everything but the last message.
		require.NoError(t, w.Truncate(context.Background(), id))
		require.NoError(t, s.Close())
	}
	t.Logf("%d rounds, %d acknowledged appends checked, %d batches read back whole, %d torn bytes dropped", rounds, totalAcked, batches, totalDropped)
}

// crashRound runs one child, whose randomness is seed, kills it after d
// and returns the IDs it acknowledged (marshalled) with their seeds. The
// moment of the kill is random: every check holds whatever the child got
// done by then, so no round needs it to have done anything.
func crashRound(t *testing.T, dir string, term int64, checkLock bool, seed uint64, d time.Duration) map[string]uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashTermEnv+"="+strconv.FormatInt(term, 10),
		crashSeedEnv+"="+strconv.FormatUint(seed, 10))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	acked := map[string]uint64{}
	handle := func(line string) {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "ack" {
			seed, err := strconv.ParseUint(f[2], 10, 64)
			require.NoError(t, err)
			acked[f[1]] = seed
		}
	}
	select {
	case line, ok := <-lines:
		require.Truef(t, ok && strings.HasPrefix(line, "ready"), "child did not start: %q %s", line, stderr.String())
		if checkLock {
			_, err := New(context.Background(), crashConfig(dir))
			require.ErrorIs(t, err, ErrLocked)
			require.Contains(t, err.Error(), "pid "+strconv.Itoa(cmd.Process.Pid))
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		require.FailNow(t, "child did not become ready")
	}
	deadline := time.After(d)
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			handle(line)
		case <-deadline:
			break loop
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	for line := range lines {
		handle(line)
	}
	err = cmd.Wait()
	require.Error(t, err, "the child should have been killed")
	require.Emptyf(t, stderr.String(), "child complained")
	return acked
}

// readUntil reads the channel from the start through the message last.
func readUntil(t *testing.T, w walimpls.WALImpl, last message.ID) []message.Immutable {
	t.Helper()
	s, err := w.Read(context.Background(), walimpls.ReadOption{Name: "crash-check", DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	var out []message.Immutable
	for {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended: %v", s.Error())
			out = append(out, m)
			if m.ID().EQ(last) {
				return out
			}
			require.True(t, m.ID().LT(last), "read past %s: %s", last, m.ID())
		case <-time.After(10 * time.Second):
			require.FailNow(t, "watchdog: reading back")
		}
	}
}
