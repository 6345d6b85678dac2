package walimplstest

import (
	"context"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// testDelete checks Opener.Delete on one node: the channel's writer is
// fenced for good, its scanners end with ErrPositionGone, the name opens
// again as a new, empty channel at any term, a channel whose name shares a
// prefix is untouched, and bad input and a closed opener are errors.
func testDelete(t *testing.T, e *env) {
	o := e.opener()
	name := channelName("del")
	neighbour := name + ".kept" // shares the prefix: a backend deriving names must keep it apart

	w := e.open(o, name, 3, walimpls.ReadWrite)
	old := simpleMessages(t, "old", 5)
	oldIDs := e.appendAll(w, old)
	kept := e.open(o, neighbour, 1, walimpls.ReadWrite)
	keptMsgs := simpleMessages(t, "kept", 3)
	keptIDs := e.appendAll(kept, keptMsgs)

	ro := e.open(o, name, 0, walimpls.ReadOnly)
	tailing := e.read(ro, cursor.All())
	checkSequence(t, oldIDs, old, e.recv(tailing, len(old)))
	writerScan := e.read(w, cursor.All())
	checkSequence(t, oldIDs, old, e.recv(writerScan, len(old)))

	require.NoError(t, e.do("Delete", func(ctx context.Context) error { return o.Delete(ctx, name) }), "Delete")

	// The writer is finished: appends, batches and truncates are fenced.
	e.expectDeletedWriter(w, oldIDs[len(oldIDs)-1], true)
	// Its scanners and those of other WALs of this opener end.
	for _, s := range []walimpls.Scanner{tailing, writerScan} {
		e.waitClosed(s)
		require.ErrorIs(t, s.Error(), walimpls.ErrPositionGone, "a scanner of a deleted channel ends with ErrPositionGone")
	}

	// Deleting again, a name that never held a channel, concurrently: all
	// succeed.
	require.NoError(t, e.do("Delete again", func(ctx context.Context) error { return o.Delete(ctx, name) }))
	require.NoError(t, e.do("Delete of a name never opened", func(ctx context.Context) error {
		return o.Delete(ctx, channelName("never"))
	}))
	err := e.do("Delete of an invalid name", func(ctx context.Context) error { return o.Delete(ctx, "no spaces") })
	require.ErrorIs(t, err, walimpls.ErrInvalidChannel)
	err = e.do("Delete of an empty name", func(ctx context.Context) error { return o.Delete(ctx, "") })
	require.ErrorIs(t, err, walimpls.ErrInvalidChannel)

	// The name opens again, at a lower term than the deleted channel had,
	// as a new and empty channel.
	fresh := e.open(o, name, 0, walimpls.ReadWrite)
	last, err := e.last(fresh)
	require.NoError(t, err)
	require.Truef(t, last.IsZero(), "Last of a channel opened after Delete is %s, not the zero ID", last)
	s := e.read(fresh, cursor.All())
	e.quiet(s)
	newMsgs := simpleMessages(t, "new", 2)
	newIDs := e.appendAll(fresh, newMsgs)
	checkSequence(t, newIDs, newMsgs, e.recv(s, len(newMsgs)))

	// The deleted channel's writer stays fenced, and writes nothing into
	// the new channel.
	e.expectDeletedWriter(w, oldIDs[len(oldIDs)-1], true)
	checkSequence(t, newIDs, newMsgs, e.recv(e.read(fresh, cursor.All()), len(newMsgs)))
	e.quiet(s)

	// The neighbour kept everything.
	checkSequence(t, keptIDs, keptMsgs, e.recv(e.read(kept, cursor.All()), len(keptMsgs)))
	_, err = e.appendOne(kept, mustMessage(t, []byte("still-mine"), nil))
	require.NoError(t, err, "a channel sharing a prefix with the deleted one still takes appends")

	require.NoError(t, o.Close())
	err = e.do("Delete on a closed opener", func(ctx context.Context) error { return o.Delete(ctx, name) })
	require.ErrorIs(t, err, walimpls.ErrClosed)
}

// testDeleteFencesOtherNodes checks that, on a backend that fences, Delete
// on one node finishes the writer another node opened: it never stores
// again, neither before nor after the name is opened again.
func testDeleteFencesOtherNodes(t *testing.T, e *env) {
	if !e.caps.Fencing {
		t.Skip(noFencingSkip)
	}
	nodeA, nodeB := e.opener(), e.opener()
	name := channelName("del-remote")
	wa := e.open(nodeA, name, 5, walimpls.ReadWrite)
	ids := e.appendAll(wa, simpleMessages(t, "A", 3))

	require.NoError(t, e.do("Delete", func(ctx context.Context) error { return nodeB.Delete(ctx, name) }))
	e.expectDeletedWriter(wa, ids[len(ids)-1], false)

	wb := e.open(nodeB, name, 1, walimpls.ReadWrite)
	bMsgs := simpleMessages(t, "B", 2)
	bIDs := e.appendAll(wb, bMsgs)
	e.expectDeletedWriter(wa, ids[len(ids)-1], false)
	bMore := mustMessage(t, []byte("B-after"), nil)
	id, err := e.appendOne(wb, bMore)
	require.NoError(t, err, "the new channel's writer is not disturbed by the deleted channel's")
	checkSequence(t, append(bIDs, id), append(bMsgs, bMore),
		e.recv(e.read(wb, cursor.All()), len(bMsgs)+1))
}

// expectDeletedWriter checks that w, a writer of a deleted channel, can
// neither append, append a batch nor truncate. When the Opener that deleted
// the channel opened w (local), the error must say the channel was deleted.
func (e *env) expectDeletedWriter(w walimpls.WALImpl, someID message.ID, local bool) {
	t := e.t
	t.Helper()
	_, err := e.appendOne(w, mustMessage(t, []byte("after-delete"), nil))
	require.ErrorIs(t, err, walimpls.ErrFenced, "Append of a deleted channel's writer")
	_, err = within(e, "AppendBatch", func(ctx context.Context) ([]message.ID, error) {
		return w.AppendBatch(ctx, simpleMessages(t, "after-delete", 2))
	})
	require.ErrorIs(t, err, walimpls.ErrFenced, "AppendBatch of a deleted channel's writer")
	err = e.truncate(w, someID)
	require.ErrorIs(t, err, walimpls.ErrFenced, "Truncate of a deleted channel's writer")
	if local {
		var fe *walimpls.FencedError
		require.Truef(t, errors.As(err, &fe) && fe.Deleted,
			"the writer of a channel its own Opener deleted fails with a *FencedError with Deleted set, not %v", err)
	}
}
