package lifecycle

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scanner is the smallest goroutine with a Run: it waits until stopped or
// failed.
type scanner struct {
	*Run
	fail chan error
}

func start() *scanner {
	s := &scanner{Run: NewRun(), fail: make(chan error, 1)}
	go func() {
		select {
		case <-s.Stopping():
			s.End(s.Context().Err()) // what it saw while stopping does not count
		case err := <-s.fail:
			s.End(err)
		}
	}()
	return s
}

func TestRun(t *testing.T) {
	closed := errors.New("wal closed")
	failed := errors.New("position gone")
	for name, tc := range map[string]struct {
		end  func(s *scanner)
		want error
	}{
		"user close":      {func(s *scanner) { require.NoError(t, s.Close()) }, nil},
		"stopped by wal":  {func(s *scanner) { s.Stop(closed); <-s.Done() }, closed},
		"first stop wins": {func(s *scanner) { s.Stop(closed); s.Stop(nil); <-s.Done() }, closed},
		"failed":          {func(s *scanner) { s.fail <- failed; <-s.Done() }, failed},
		"close after end": {func(s *scanner) { s.fail <- failed; <-s.Done(); require.NoError(t, s.Close()) }, failed},
	} {
		t.Run(name, func(t *testing.T) {
			s := start()
			assert.False(t, s.Stopped())
			assert.NoError(t, s.Error(), "no error before Done")
			tc.end(s)
			assert.Equal(t, tc.want, s.Error())
			require.NoError(t, s.Close(), "Close is idempotent")
		})
	}
}

// A goroutine that failed and finishes its work before it ends (Fail)
// ends with its failure, whatever stops it while it finishes; one stopped
// before it failed ends with the stop's reason.
func TestFail(t *testing.T) {
	closed := errors.New("wal closed")
	failed := errors.New("position gone")
	// finishing starts a goroutine that has failed and works until it is
	// stopped or finished is closed.
	finishing := func() (r *Run, finished chan struct{}) {
		r, finished = NewRun(), make(chan struct{})
		hasFailed := make(chan struct{})
		go func() {
			r.Fail(failed)
			close(hasFailed)
			select {
			case <-r.Stopping():
			case <-finished:
			}
			r.End(r.Context().Err())
		}()
		<-hasFailed
		return r, finished
	}
	for name, tc := range map[string]struct {
		end  func(r *Run, finished chan struct{})
		want error
	}{
		"finished":                   {func(r *Run, finished chan struct{}) { close(finished); <-r.Done() }, failed},
		"user close while finishing": {func(r *Run, _ chan struct{}) { require.NoError(t, r.Close()) }, failed},
		"wal stop while finishing":   {func(r *Run, _ chan struct{}) { r.Stop(closed); <-r.Done() }, failed},
	} {
		t.Run(name, func(t *testing.T) {
			r, finished := finishing()
			assert.NoError(t, r.Error(), "no error before Done")
			tc.end(r, finished)
			assert.Equal(t, tc.want, r.Error())
			require.NoError(t, r.Close(), "Close is idempotent")
		})
	}
	t.Run("fail after stop", func(t *testing.T) {
		r := NewRun()
		r.Stop(closed)
		go func() {
			r.Fail(failed)
			r.End(failed)
		}()
		<-r.Done()
		assert.Equal(t, closed, r.Error())
	})
}

func TestGroup(t *testing.T) {
	var g Group[*scanner]
	a, b, c := start(), start(), start()
	require.True(t, g.Add(a))
	require.True(t, g.Add(b))
	require.True(t, g.Add(c))
	c.fail <- errors.New("gone")
	<-c.Done()
	g.Remove(c)
	assert.Equal(t, 2, g.Len())

	closed := errors.New("wal closed")
	g.StopAll(closed)
	for _, s := range []*scanner{a, b} {
		select {
		case <-s.Done():
		case <-time.After(time.Second):
			t.Fatal("StopAll returned before its members ended")
		}
		assert.Equal(t, closed, s.Error())
	}
	d := start()
	assert.False(t, g.Add(d), "no member joins after StopAll")
	require.NoError(t, d.Close())
	assert.Equal(t, 0, g.Len())
}
