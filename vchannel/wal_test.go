package vchannel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/vchannel"
	"github.com/streamwal/streamwal/walimpls"
)

// A view stamps what it appends with its vchannel, refuses messages of
// another vchannel (storing nothing), and reads only its own data messages,
// in order, from the caller's position.
func TestViewStampsAppendsAndFiltersReads(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		w := openWAL(t, b.open(t), "pch", adaptor.Options{})
		a, other := view(t, w, "vc-a"), view(t, w, "vc-b")
		require.Equal(t, "vc-a", a.Name())
		require.Equal(t, "pch", a.PChannel().Name)
		ctx, cancel := context.WithTimeout(context.Background(), watchdog)
		defer cancel()

		_, err := a.Append(ctx, msg(t, "a0"))
		require.NoError(t, err)
		_, err = other.Append(ctx, msg(t, "b0"))
		require.NoError(t, err)
		_, err = w.Append(ctx, msg(t, "p0")) // the pchannel's, no vchannel
		require.NoError(t, err)
		done := make(chan error, 1)
		a.AppendAsync(ctx, msg(t, "a1"), func(_ adaptor.AppendResult, err error) { done <- err })
		require.NoError(t, <-done)
		_, err = a.AppendBatch(ctx, []message.Message{msg(t, "a2"), msg(t, "a3")})
		require.NoError(t, err)
		_, err = a.Append(ctx, msg(t, "a4").WithVChannel("vc-a")) // already its own: kept
		require.NoError(t, err)

		// Messages of another vchannel are refused, certainly not stored.
		_, err = a.Append(ctx, msg(t, "x").WithVChannel("vc-b"))
		require.ErrorIs(t, err, vchannel.ErrWrongVChannel)
		require.True(t, walimpls.NotStored(err))
		a.AppendAsync(ctx, msg(t, "x").WithVChannel("vc-b"), func(_ adaptor.AppendResult, err error) { done <- err })
		err = <-done
		require.ErrorIs(t, err, vchannel.ErrWrongVChannel)
		require.True(t, walimpls.NotStored(err))
		a.AppendAsync(ctx, msg(t, "x").WithVChannel("vc-b"), nil) // no callback: nothing to call
		res, err := a.AppendBatch(ctx, []message.Message{msg(t, "x"), msg(t, "x").WithVChannel("vc-b")})
		require.ErrorIs(t, err, vchannel.ErrWrongVChannel)
		require.True(t, walimpls.NotStored(err))
		require.Len(t, res, 2)

		s, err := a.Read(ctx, adaptor.ReadOption{})
		require.NoError(t, err)
		defer s.Close()
		got := recvN(t, s, 5)
		// The adaptor appends a batch's messages concurrently, so their
		// order among themselves is not the slice's; the rest follows the
		// calls.
		p := payloads(t, "vc-a", got)
		require.Equal(t, []string{"a0", "a1"}, p[:2])
		require.ElementsMatch(t, []string{"a2", "a3"}, p[2:4])
		require.Equal(t, "a4", p[4])
		// Nothing of the refused appends, of vc-b or of the pchannel.
		nothingBefore(t, w, s, "vc-a")

		sb, err := other.Read(ctx, adaptor.ReadOption{Filter: adaptor.Filter{VChannels: []string{"vc-b"}}})
		require.NoError(t, err)
		defer sb.Close()
		require.Equal(t, []string{"b0"}, payloads(t, "vc-b", recvN(t, sb, 1)))
		nothingBefore(t, w, sb, "vc-b")

		// The caller's deliver policy holds: after a checkpoint, the rest.
		cp, err := cursor.CheckpointOf(got[1])
		require.NoError(t, err)
		parsed, err := a.ParseCheckpoint(cp.Marshal())
		require.NoError(t, err)
		rest, err := a.Read(ctx, adaptor.ReadOption{DeliverPolicy: cursor.After(parsed)})
		require.NoError(t, err)
		defer rest.Close()
		require.Equal(t, append(p[2:], "marker"), payloads(t, "vc-a", recvN(t, rest, 4)))

		// A read filter may only name the view's vchannel.
		_, err = a.Read(ctx, adaptor.ReadOption{Filter: adaptor.Filter{VChannels: []string{"vc-a", "vc-b"}}})
		require.ErrorIs(t, err, vchannel.ErrWrongVChannel)

		// The pchannel's state passes through.
		require.NoError(t, a.Sync(ctx))
		require.NoError(t, a.Err())
		select {
		case <-a.Available():
			t.Fatal("available pchannel reported unavailable")
		default:
		}
		require.NoError(t, w.Close())
		<-a.Available()
		require.ErrorIs(t, a.Err(), walimpls.ErrClosed)
		_, err = a.Append(ctx, msg(t, "late"))
		require.ErrorIs(t, err, walimpls.ErrClosed)
	})
}

func TestViewRefusesBadNames(t *testing.T) {
	w := openWAL(t, backends()[0].open(t), "pch", adaptor.Options{})
	for _, name := range []string{"", ".", "..", "a/b", "vc a", "ü", strings.Repeat("v", walimpls.MaxChannelNameLen+1)} {
		_, err := vchannel.New(w, name)
		require.ErrorIs(t, err, walimpls.ErrInvalidChannel, "name %q", name)
	}
	_, err := vchannel.New(nil, "vc")
	require.Error(t, err)
	v, err := vchannel.New(w, strings.Repeat("v", walimpls.MaxChannelNameLen))
	require.NoError(t, err)
	require.Len(t, v.Name(), walimpls.MaxChannelNameLen)
}
