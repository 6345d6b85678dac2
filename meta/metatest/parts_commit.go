package metatest

import (
	"strconv"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/meta"
)

// testCommit: a Commit applies all of its puts and deletes at one new
// revision, under conditions on existing keys, absent keys and keys it
// does not write.
func testCommit(e *env) {
	t := e.t
	ra := e.mustPut("x/a", []byte("a0"), meta.Absent)
	rb := e.mustPut("x/b", []byte("b0"), meta.Absent)
	rg := e.mustPut("x/guard", []byte("g"), meta.Absent)
	rev := e.mustCommit(meta.Txn{
		Conds: []meta.Cond{
			{Key: "x/a", Revision: ra},
			{Key: "x/new", Revision: meta.Absent},
			{Key: "x/guard", Revision: rg},
			{Key: "x/never", Revision: meta.Absent},
		},
		Puts:    []meta.KV{{Key: "x/a", Value: []byte("a1")}, {Key: "x/new", Value: []byte("n1")}, {Key: "x/empty"}},
		Deletes: []string{"x/b", "x/missing"},
	})
	require.Greater(t, rev, max(ra, rb, rg))
	e.hasValue("x/a", []byte("a1"), rev)
	e.hasValue("x/new", []byte("n1"), rev)
	e.hasValue("x/empty", nil, rev)
	e.hasValue("x/guard", []byte("g"), rg)
	e.notFound("x/b")
	e.notFound("x/missing")
	kvs, lrev := e.mustList("x/")
	require.Equal(t, []string{"x/a", "x/empty", "x/guard", "x/new"}, sortedKeys(kvs))
	require.GreaterOrEqual(t, lrev, rev)

	// Deletes only, under a condition on a key just committed.
	rev2 := e.mustCommit(meta.Txn{Conds: []meta.Cond{{Key: "x/new", Revision: rev}}, Deletes: []string{"x/a", "x/new"}})
	require.Greater(t, rev2, rev)
	kvs, _ = e.mustList("x/")
	require.Equal(t, []string{"x/empty", "x/guard"}, sortedKeys(kvs))

	// Unconditional, many keys at one revision.
	var txn meta.Txn
	for i := range meta.MaxCommitOps {
		txn.Puts = append(txn.Puts, meta.KV{Key: "y/" + strconv.Itoa(i), Value: []byte(strconv.Itoa(i))})
	}
	rev3 := e.mustCommit(txn)
	require.Greater(t, rev3, rev2)
	kvs, _ = e.mustList("y/")
	require.Len(t, kvs, meta.MaxCommitOps)
	for _, kv := range kvs {
		require.Equal(t, rev3, kv.Revision, "%q: every put of a Commit is at its revision", kv.Key)
	}
}

// testCommitConflict: a Commit with a condition that does not hold fails
// with ErrConflict naming the key, and applies nothing, whichever of its
// conditions fails.
func testCommitConflict(e *env) {
	t := e.t
	ra := e.mustPut("a", []byte("a0"), meta.Absent)
	rb := e.mustPut("b", []byte("b0"), meta.Absent)
	rbNow := e.mustPut("b", []byte("b1"), rb) // rb is stale now
	writes := meta.Txn{
		Puts:    []meta.KV{{Key: "a", Value: []byte("changed")}, {Key: "c", Value: []byte("new")}},
		Deletes: []string{"b"},
	}
	before := e.state()
	for _, c := range []struct {
		what  string
		conds []meta.Cond
		bad   string
	}{
		{"a stale revision after a good condition", []meta.Cond{{Key: "a", Revision: ra}, {Key: "b", Revision: rb}}, "b"},
		{"a stale revision before a good condition", []meta.Cond{{Key: "b", Revision: rb}, {Key: "a", Revision: ra}}, "b"},
		{"Absent on an existing key", []meta.Cond{{Key: "a", Revision: ra}, {Key: "b", Revision: meta.Absent}}, "b"},
		{"a revision on a missing key", []meta.Cond{{Key: "a", Revision: ra}, {Key: "c", Revision: ra}}, "c"},
		{"a future revision", []meta.Cond{{Key: "a", Revision: rbNow + 1_000_000}}, "a"},
		{"a failing condition on a key not written", []meta.Cond{{Key: "a", Revision: ra}, {Key: "d", Revision: rbNow}}, "d"},
	} {
		txn := writes
		txn.Conds = c.conds
		_, err := e.commit(txn)
		require.ErrorIs(t, err, meta.ErrConflict, "Commit with %s", c.what)
		require.Contains(t, err.Error(), strconv.Quote(c.bad), "Commit with %s: the error does not name the key", c.what)
		e.unchanged(before, "a Commit with "+c.what)
	}
	// The same writes under conditions that hold.
	txn := writes
	txn.Conds = []meta.Cond{{Key: "a", Revision: ra}, {Key: "b", Revision: rbNow}, {Key: "c", Revision: meta.Absent}}
	rev := e.mustCommit(txn)
	e.hasValue("a", []byte("changed"), rev)
	e.hasValue("c", []byte("new"), rev)
	e.notFound("b")
}
