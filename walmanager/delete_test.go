package walmanager_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walmanager"
)

// deleteStack is a manager over the memory backend whose opener also
// deletes.
func deleteStack(t *testing.T, deleter walmanager.ChannelDeleter) (*walmanager.Manager, walimpls.Opener) {
	t.Helper()
	op, err := memory.New(context.Background(), memory.Config{Cluster: memory.NewCluster()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, op.Close()) })
	if deleter == nil {
		deleter = op
	}
	open := walmanager.WALOpenerFunc(func(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error) {
		return adaptor.Open(ctx, op, ch, adaptor.Options{TimeTickInterval: time.Hour})
	})
	return newManager(t, open, walmanager.Options{Deleter: deleter}), op
}

// userMessages reads every user message of the channel's WAL at term.
func userMessages(t *testing.T, m *walmanager.Manager, ch walmanager.Channel, want int) []string {
	t.Helper()
	w, err := m.GetAvailableWAL(ch)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, w.Sync(ctx))
	s, err := w.Read(ctx, adaptor.ReadOption{DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	var got []string
	for len(got) < want {
		select {
		case msg := <-s.Chan():
			got = append(got, string(msg.Payload()))
		case <-time.After(10 * time.Second):
			require.FailNowf(t, "watchdog", "read %d of %d messages", len(got), want)
		}
	}
	return got
}

func appendText(t *testing.T, m *walmanager.Manager, ch walmanager.Channel, text string) {
	t.Helper()
	w, err := m.GetAvailableWAL(ch)
	require.NoError(t, err)
	msg, err := message.New([]byte(text), nil)
	require.NoError(t, err)
	_, err = w.Append(context.Background(), msg)
	require.NoError(t, err)
}

func TestDeleteForgetsTheChannelAndItsTerms(t *testing.T) {
	ctx := context.Background()
	m, _ := deleteStack(t, nil)
	ch := walmanager.Channel{Name: "orders", Term: 3}
	require.NoError(t, m.Open(ctx, ch))
	appendText(t, m, ch, "old")
	old, err := m.GetAvailableWAL(ch)
	require.NoError(t, err)

	require.NoError(t, m.Delete(ctx, ch))
	require.Empty(t, m.Channels(), "a deleted channel leaves no record")
	_, err = m.GetAvailableWAL(ch)
	require.ErrorIs(t, err, walmanager.ErrChannelNotAvailable)
	msg, _ := message.New([]byte("stale"), nil)
	_, err = old.Append(ctx, msg)
	require.Error(t, err, "the deleted channel's WAL takes no appends")

	// The name opens again, at a lower term, empty.
	fresh := walmanager.Channel{Name: "orders", Term: 1}
	require.NoError(t, m.Open(ctx, fresh))
	appendText(t, m, fresh, "new")
	require.Equal(t, []string{"new"}, userMessages(t, m, fresh, 1))

	require.NoError(t, m.Delete(ctx, walmanager.Channel{Name: "never-opened", Term: 0}),
		"deleting a channel the manager never knew deletes it from the backend all the same")
}

func TestDeleteRefusesAStaleTerm(t *testing.T) {
	ctx := context.Background()
	m, _ := deleteStack(t, nil)
	ch := walmanager.Channel{Name: "orders", Term: 5}
	require.NoError(t, m.Open(ctx, ch))
	appendText(t, m, ch, "kept")

	err := m.Delete(ctx, walmanager.Channel{Name: "orders", Term: 4})
	require.ErrorIs(t, err, walmanager.ErrStaleTerm)
	require.Equal(t, []string{"kept"}, userMessages(t, m, ch, 1), "a refused delete deletes nothing")
	st, ok := statusOf(m, "orders")
	require.True(t, ok)
	require.Equal(t, walmanager.StateAvailable, st.State)
}

type failingDeleter struct{ calls int }

func (d *failingDeleter) Delete(context.Context, string) error {
	d.calls++
	return errBoom
}

func TestDeleteReportsTheBackendAndNeedsADeleter(t *testing.T) {
	ctx := context.Background()
	d := &failingDeleter{}
	m, _ := deleteStack(t, d)
	ch := walmanager.Channel{Name: "orders", Term: 2}
	require.NoError(t, m.Open(ctx, ch))
	err := m.Delete(ctx, ch)
	require.ErrorIs(t, err, errBoom)
	require.Equal(t, 1, d.calls)
	require.Empty(t, m.Channels(), "removed and forgotten even though the backend failed")

	noDeleter := newManager(t, walmanager.WALOpenerFunc(func(context.Context, adaptor.Channel) (adaptor.WAL, error) {
		return nil, errBoom
	}), walmanager.Options{})
	require.ErrorIs(t, noDeleter.Delete(ctx, ch), walmanager.ErrNoDeleter)
	require.Empty(t, noDeleter.Channels(), "nothing is recorded without a deleter")
	require.ErrorIs(t, noDeleter.Delete(ctx, walmanager.Channel{Name: "bad name"}), walimpls.ErrInvalidChannel)
}

// TestManagerDoesNotGrowWithDeletedChannels opens and deletes 2,000
// channels, 10 alive at a time: the manager's records follow the live ones.
func TestManagerDoesNotGrowWithDeletedChannels(t *testing.T) {
	ctx := context.Background()
	m, _ := deleteStack(t, nil)
	const total, alive = 2000, 10
	for i := range total {
		require.NoError(t, m.Open(ctx, walmanager.Channel{Name: fmt.Sprintf("ch-%d", i), Term: 1}))
		if i >= alive {
			require.NoError(t, m.Delete(ctx, walmanager.Channel{Name: fmt.Sprintf("ch-%d", i-alive), Term: 1}))
		}
		require.LessOrEqual(t, len(m.Channels()), alive+1)
	}
	require.Len(t, m.Channels(), alive)
}
