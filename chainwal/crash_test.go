package chainwal_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walmanager"
)

// The crash tests run a child process (this test binary) that migrates a
// channel between two local stores with its chain in bbolt, and kills
// itself with SIGKILL right after one step (chainwal.Config.AfterStep);
// the parent then opens the same files as the restarted node would.
const (
	crashChildEnv = "STREAMWAL_CHAINWAL_CRASH_DIR"
	crashStepEnv  = "STREAMWAL_CHAINWAL_CRASH_STEP"
)

// diskNode is a node's view of files in dir: a chain store and two local
// backends, "disk1" and "disk2".
//
// The backends sync at an interval (local.SyncInterval), which acknowledges
// an append once it is written to the kernel: a kill -9 then loses nothing
// acknowledged, which is what the test checks. local.SyncNone would not do:
// it acknowledges an append once framed in the journal's buffer, and a
// process killed before the flusher wrote the buffer loses it as documented
// (the prune-deleted child's last appends, on disk2, are followed by no sync
// of disk2, only by a delete on disk1).
type diskNode struct {
	kv       *boltstore.Store
	store    *chain.Store
	backends map[string]walimpls.Opener
}

func openDiskNode(dir string) (*diskNode, error) {
	kv, err := boltstore.Open(filepath.Join(dir, "meta.db"), boltstore.Options{})
	if err != nil {
		return nil, err
	}
	n := &diskNode{kv: kv, store: chain.NewStore(kv, chain.Options{}), backends: map[string]walimpls.Opener{}}
	for _, name := range []string{"disk1", "disk2"} {
		o, err := local.New(context.Background(), local.Config{Dir: filepath.Join(dir, name), Sync: local.SyncInterval})
		if err != nil {
			n.close()
			return nil, err
		}
		n.backends[name] = o
	}
	return n, nil
}

func (n *diskNode) close() {
	for _, o := range n.backends {
		_ = o.Close()
	}
	_ = n.kv.Close()
}

// Opener implements chainread.Openers.
func (n *diskNode) Opener(b chain.Backend) (walimpls.Opener, error) {
	if o, ok := n.backends[b.Name]; ok {
		return o, nil
	}
	return nil, errors.Newf("no entry %q", b.Name)
}

func (n *diskNode) describe(name string) (chain.Backend, error) {
	if _, ok := n.backends[name]; !ok {
		return chain.Backend{}, errors.Newf("no entry %q", name)
	}
	return chain.Backend{Name: name, Kind: local.Name}, nil
}

func (n *diskNode) opener(afterStep func(chainwal.Step, string)) (*chainwal.Opener, error) {
	d, _ := n.describe("disk1")
	return chainwal.New(chainwal.Config{Store: n.store, Openers: n, Default: d, Describe: n.describe, AfterStep: afterStep,
		WAL: adaptor.Options{TimeTickInterval: 20 * time.Millisecond}})
}

// crashChild is the child: it appends to channel "c" at term 1 (printing
// "acked <payload> <id>" for each acknowledged append), migrates it to
// disk2 at term 2, appends more, and prunes segment 0, killing itself
// after step. It never returns when the step is reached.
func crashChild(dir, step string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	n, err := openDiskNode(dir)
	if err != nil {
		return fail(err)
	}
	o, err := n.opener(func(s chainwal.Step, _ string) {
		if string(s) == step {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	})
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	m, err := walmanager.New(o, walmanager.Options{Deleter: o})
	if err != nil {
		return fail(err)
	}
	if err := m.Open(ctx, adaptor.Channel{Name: "c", Term: 1}); err != nil {
		return fail(err)
	}
	appendSome := func(term int64, prefix string) error {
		w, err := m.GetAvailableWAL(adaptor.Channel{Name: "c", Term: term})
		if err != nil {
			return err
		}
		for i := range 20 {
			p := fmt.Sprintf("%s-%d", prefix, i)
			msg, _ := message.New([]byte(p), nil)
			r, err := w.Append(ctx, msg)
			if err != nil {
				return err
			}
			fmt.Printf("acked %s %s\n", p, r.ID.Marshal())
		}
		return nil
	}
	if err := appendSome(1, "a"); err != nil {
		return fail(err)
	}
	if _, err := o.Migrate(ctx, m, "c", "disk2", "child"); err != nil {
		return fail(err)
	}
	if err := appendSome(2, "b"); err != nil {
		return fail(err)
	}
	w, err := m.GetAvailableWAL(adaptor.Channel{Name: "c", Term: 2})
	if err != nil {
		return fail(err)
	}
	first, err := w.ParseID("s1/0")
	if err != nil {
		return fail(err)
	}
	if err := w.Truncate(ctx, first); err != nil {
		return fail(err)
	}
	return fail(errors.Newf("step %q never came", step))
}

// TestCrashAtEveryStep kills the migrating process (kill -9) right after
// each step of a migration and of the prune after it. A restart converges
// to one valid chain on the target, every acknowledged append is read
// back once in order, and the old segment accepts no append after its
// seal; a prune interrupted after the data's deletion is finished by the
// next.
func TestCrashAtEveryStep(t *testing.T) {
	for _, step := range []chainwal.Step{chainwal.StepFenced, chainwal.StepSealed, chainwal.StepOpened, chainwal.StepPruneDeleted} {
		t.Run(string(step), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashStepEnv+"="+string(step))
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			var acked []string
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "acked" {
					acked = append(acked, f[1])
				}
			}
			err = cmd.Wait()
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "the child did not die: %v; stderr: %s", err, stderr.String())
			ws, _ := exit.Sys().(syscall.WaitStatus)
			require.Truef(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child ended with %v; stderr: %s", err, stderr.String())

			// The restart.
			ctx := testCtx(t)
			n, err := openDiskNode(dir)
			require.NoError(t, err)
			defer n.close()
			o, err := n.opener(nil)
			require.NoError(t, err)
			c, err := n.store.Get(ctx, "c")
			require.NoError(t, err)
			require.NoError(t, c.Validate())
			t.Logf("after the crash at %s: %d segments, pending %v, %d acked", step, len(c.Segments), c.Pending, len(acked))

			// The old segment accepts nothing at a term below the seal's:
			// not through the chain, and not on its backend either.
			if c.Pending == nil && len(c.Segments) > 1 || step == chainwal.StepPruneDeleted {
				_, err := o.Open(ctx, adaptor.Channel{Name: "c", Term: 1})
				require.ErrorIs(t, err, walimpls.ErrFenced)
			}
			if step != chainwal.StepPruneDeleted {
				_, err := adaptor.Open(ctx, n.backends["disk1"], adaptor.Channel{Name: "c", Term: 1}, adaptor.Options{})
				require.ErrorIs(t, err, walimpls.ErrFenced, "a writer of term 1 opened the old segment")
			}
			w, err := o.Open(ctx, adaptor.Channel{Name: "c", Term: 3})
			require.NoError(t, err)
			defer w.Close()
			c, err = n.store.Get(ctx, "c")
			require.NoError(t, err)
			require.Nil(t, c.Pending)
			require.Equal(t, "disk2", c.Last().Backend.Name, "the restart did not finish the migration")

			if step == chainwal.StepPruneDeleted {
				require.Equal(t, uint64(0), c.First(), "the segment whose data was deleted is still in the chain")
				_, err := w.Read(ctx, adaptor.ReadOption{})
				require.ErrorIs(t, err, walimpls.ErrPositionGone, "a read of the deleted segment")
				first, err := w.ParseID("s1/0")
				require.NoError(t, err)
				require.NoError(t, w.Truncate(ctx, first))
				c, err = n.store.Get(ctx, "c")
				require.NoError(t, err)
				require.Equal(t, uint64(1), c.First(), "the next prune drops it")
				acked = acked[20:] // segment 0 is gone, by the prune
			}
			msg, _ := message.New([]byte("after"), nil)
			_, err = w.Append(ctx, msg)
			require.NoError(t, err)
			acked = append(acked, "after")

			s, err := w.Read(ctx, adaptor.ReadOption{})
			require.NoError(t, err)
			defer s.Close()
			got := recv(t, s, len(acked))
			for i, m := range got {
				require.Equal(t, acked[i], string(m.Payload()), "message %d", i)
				if i > 0 {
					require.True(t, got[i-1].ID().LT(m.ID()))
				}
			}
			_, _, chained := cursor.SplitID(got[len(got)-1].ID())
			require.True(t, chained, "the chain WAL delivers chain IDs")
		})
	}
}
