package boltstore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
)

// childEnv selects what TestChild does in a child process.
const (
	childEnv     = "BOLTSTORE_CHILD"
	childPathEnv = "BOLTSTORE_CHILD_PATH"
)

// requireLocked checks err is the error of an opener that found the file
// locked, returned within timeout (plus slack for a loaded machine).
func requireLocked(t *testing.T, err error, took, timeout time.Duration) {
	t.Helper()
	require.ErrorIs(t, err, boltstore.ErrLocked)
	require.ErrorIs(t, err, meta.ErrUnavailable)
	require.ErrorIs(t, err, bolterrors.ErrTimeout, "the cause is kept")
	require.Less(t, took, timeout+2*time.Second, "the second opener waited far beyond its timeout")
}

func TestSecondOpenerInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	s := openStore(t, path, boltstore.Options{})
	for _, timeout := range []time.Duration{200 * time.Millisecond, 0} {
		start := time.Now()
		s2, err := boltstore.Open(path, boltstore.Options{Timeout: timeout})
		took := time.Since(start)
		if s2 != nil {
			_ = s2.Close()
		}
		want := timeout
		if want == 0 {
			want = boltstore.DefaultTimeout
			// bbolt polls every 50 ms and may give up one poll early.
			require.Greater(t, took, want-200*time.Millisecond, "the zero Timeout is not the default")
		}
		requireLocked(t, err, took, want)
		require.Contains(t, err.Error(), path)
	}
	// The first store still works, and once it is closed the file opens.
	_, err := s.Put(ctxT(t), "k", []byte("v"), meta.Absent)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	s3 := openStore(t, path, boltstore.Options{Timeout: 200 * time.Millisecond})
	_, err = s3.Get(ctxT(t), "k")
	require.NoError(t, err)
}

// child runs TestChild in a child process doing what, on path. Its
// standard input is a pipe: closing it ends a child that holds the store.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
}

func startChild(t *testing.T, what, path string) *child {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+what, childPathEnv+"="+path,
		// Under -race, a process sleeps 1s at exit unless told not to.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody is reading: a writing child's acks pile up
			}
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		<-c.done
		_ = cmd.Wait()
	})
	return c
}

// next returns the child's next line of the form "word ...", skipping
// go test's own output; it fails the test if the child ends or a minute
// passes first.
func (c *child) next(t *testing.T, word string) string {
	t.Helper()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			require.True(t, ok, "the child ended before saying %q", word)
			if rest, found := strings.CutPrefix(l, word+" "); found {
				return rest
			}
		case <-timer.C:
			require.FailNowf(t, "watchdog", "the child did not say %q within a minute", word)
		}
	}
}

// TestChild is the child process of the tests below.
func TestChild(t *testing.T) {
	what, path := os.Getenv(childEnv), os.Getenv(childPathEnv)
	if what == "" {
		t.Skip("child process of the lock tests")
	}
	ctx := context.Background()
	switch what {
	case "open":
		// Try to open a store the parent holds.
		start := time.Now()
		s, err := boltstore.Open(path, boltstore.Options{Timeout: 200 * time.Millisecond})
		if s != nil {
			_ = s.Close()
		}
		fmt.Printf("result %t %t %d\n", errors.Is(err, boltstore.ErrLocked), errors.Is(err, meta.ErrUnavailable), time.Since(start).Milliseconds())
	case "hold", "write":
		// Hold the store; "write" increments a counter for ever, saying
		// each acknowledged value.
		s, err := boltstore.Open(path, boltstore.Options{})
		require.NoError(t, err)
		rev, err := s.Put(ctx, "child", []byte("was here"), meta.Any)
		require.NoError(t, err)
		fmt.Printf("ready %d\n", rev)
		if what == "hold" {
			_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin or kills us
			require.NoError(t, s.Close())
			return
		}
		for n := 1; ; n++ {
			if _, err := s.Put(ctx, "counter", []byte(strconv.Itoa(n)), meta.Any); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("acked %d\n", n)
		}
	default:
		t.Fatalf("unknown child mode %q", what)
	}
}

func TestSecondOpenerInChildProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	openStore(t, path, boltstore.Options{})
	c := startChild(t, "open", path)
	var locked, unavailable bool
	var ms int64
	_, err := fmt.Sscanf(c.next(t, "result"), "%t %t %d", &locked, &unavailable, &ms)
	require.NoError(t, err)
	require.True(t, locked, "the child's Open is not ErrLocked")
	require.True(t, unavailable, "the child's Open is not meta.ErrUnavailable")
	require.Less(t, time.Duration(ms)*time.Millisecond, 200*time.Millisecond+2*time.Second)
}

func TestChildHoldsTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	c := startChild(t, "hold", path)
	c.next(t, "ready")
	start := time.Now()
	_, err := boltstore.Open(path, boltstore.Options{Timeout: 200 * time.Millisecond})
	requireLocked(t, err, time.Since(start), 200*time.Millisecond)

	// Closed by its owner, the file opens.
	require.NoError(t, c.stdin.Close())
	waitExit(t, c)
	s := openStore(t, path, boltstore.Options{Timeout: 200 * time.Millisecond})
	kv, err := s.Get(ctxT(t), "child")
	require.NoError(t, err)
	require.Equal(t, "was here", string(kv.Value))
}

func TestReopenAfterKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	c := startChild(t, "write", path)
	c.next(t, "ready")
	var acked int
	for acked < 20 {
		n, err := strconv.Atoi(c.next(t, "acked"))
		require.NoError(t, err)
		acked = n
	}
	// Killed in the middle of its writes, holding the lock.
	require.NoError(t, c.cmd.Process.Kill())
	waitExit(t, c)

	s := openStore(t, path, boltstore.Options{Timeout: 200 * time.Millisecond})
	ctx := ctxT(t)
	kv, err := s.Get(ctx, "counter")
	require.NoError(t, err)
	n, err := strconv.Atoi(string(kv.Value))
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, acked, "an acknowledged write is lost")
	kvs, rev, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, kvs, 2)
	r, err := s.Put(ctx, "counter", []byte("after"), kv.Revision)
	require.NoError(t, err)
	require.Greater(t, r, rev)
}

// waitExit waits for the child to end, within a minute.
func waitExit(t *testing.T, c *child) {
	t.Helper()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case <-c.done:
	case <-timer.C:
		require.FailNow(t, "the child did not exit within a minute")
	}
	_ = c.cmd.Wait()
}
