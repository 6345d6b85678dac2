package boltstore_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
)

// rawUpdate changes the file at path with bbolt directly.
func rawUpdate(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, db.Update(fn))
	require.NoError(t, db.Close())
}

func TestCorruptRecords(t *testing.T) {
	ctx := ctxT(t)
	damage := map[string]func(rec []byte) []byte{
		"flipped-value": func(r []byte) []byte { r[len(r)-1] ^= 0x01; return r },
		"flipped-rev":   func(r []byte) []byte { r[8] ^= 0x01; return r },
		"short":         func(r []byte) []byte { return r[:5] },
		"empty":         func([]byte) []byte { return []byte{} },
		"unknown-kind":  func(r []byte) []byte { r[0] = 0x7f; return r },
		"moved":         nil, // the record of another key
		"future-rev":    nil, // a valid checksum, a revision above the store's
	}
	path := filepath.Join(t.TempDir(), "meta.db")
	s, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	revs := map[string]int64{}
	for name := range damage {
		revs[name], err = s.Put(ctx, "bad/"+name, []byte("value of "+name), meta.Absent)
		require.NoError(t, err)
	}
	goodRev, err := s.Put(ctx, "good", []byte("fine"), meta.Absent)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	rawUpdate(t, path, func(tx *bolt.Tx) error {
		kv := tx.Bucket([]byte("kv"))
		for name, fn := range damage {
			key := []byte("bad/" + name)
			rec := bytes.Clone(kv.Get(key))
			switch name {
			case "moved":
				rec = bytes.Clone(kv.Get([]byte("good")))
			case "future-rev":
				rec = futureRecord(key, []byte("value"), 1<<40)
			default:
				rec = fn(rec)
			}
			if err := kv.Put(key, rec); err != nil {
				return err
			}
		}
		return nil
	})

	s = openStore(t, path, boltstore.Options{})
	for name := range damage {
		key := "bad/" + name
		_, err := s.Get(ctx, key)
		require.ErrorIs(t, err, meta.ErrCorrupt, "Get of %s", name)
		require.Contains(t, err.Error(), strconv.Quote(key), "the error names the key")
		_, err = s.Put(ctx, key, []byte("x"), revs[name])
		require.ErrorIs(t, err, meta.ErrCorrupt, "Put expecting a revision over %s", name)
		require.ErrorIs(t, s.Delete(ctx, key, revs[name]), meta.ErrCorrupt, "Delete expecting a revision over %s", name)
		_, err = s.Commit(ctx, meta.Txn{Conds: []meta.Cond{{Key: key, Revision: revs[name]}}, Puts: []meta.KV{{Key: "other"}}})
		require.ErrorIs(t, err, meta.ErrCorrupt, "Commit conditioned on %s", name)
	}
	_, _, err = s.List(ctx, "bad/")
	require.ErrorIs(t, err, meta.ErrCorrupt, "List over damaged records")
	_, _, err = s.List(ctx, "")
	require.ErrorIs(t, err, meta.ErrCorrupt, "List over damaged records")

	// Other keys are fine; Any replaces or removes a damaged record.
	kv, err := s.Get(ctx, "good")
	require.NoError(t, err)
	require.Equal(t, meta.KV{Key: "good", Value: []byte("fine"), Revision: goodRev}, kv)
	kvs, _, err := s.List(ctx, "good")
	require.NoError(t, err)
	require.Len(t, kvs, 1)
	for name := range damage {
		key := "bad/" + name
		if name == "short" {
			require.NoError(t, s.Delete(ctx, key, meta.Any))
			continue
		}
		rev, err := s.Put(ctx, key, []byte("repaired"), meta.Any)
		require.NoError(t, err)
		kv, err := s.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, meta.KV{Key: key, Value: []byte("repaired"), Revision: rev}, kv)
	}
	kvs, _, err = s.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, kvs, len(damage))
}

// futureRecord is a well-formed record (see doc.go) at revision rev.
func futureRecord(key, value []byte, rev uint64) []byte {
	rec := []byte{0x01}
	rec = binary.BigEndian.AppendUint64(rec, rev)
	crc := crc32.Update(0, crc32.MakeTable(crc32.Castagnoli), rec)
	crc = crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), key)
	crc = crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), value)
	rec = binary.BigEndian.AppendUint32(rec, crc)
	return append(rec, value...)
}

func TestOpenRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	check := func(name string, setup func(path string)) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			setup(path)
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			s, err := boltstore.Open(path, boltstore.Options{})
			if s != nil {
				_ = s.Close()
			}
			require.ErrorIs(t, err, meta.ErrCorrupt)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(before, after), "Open changed a file it refused")
		})
	}
	check("garbage", func(path string) {
		require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("not a bbolt file "), 1024), 0o600))
	})
	check("other-buckets", func(path string) {
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("someone-else"))
			return err
		})
	})
	newer := func(path string) {
		s, err := boltstore.Open(path, boltstore.Options{})
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}
	check("newer-format", func(path string) {
		newer(path)
		rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("format"), []byte{2}) })
	})
	check("bad-rev", func(path string) {
		newer(path)
		rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("rev"), []byte{1, 2, 3}) })
	})
	check("no-kv-bucket", func(path string) {
		newer(path)
		rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("kv")) })
	})

	// An empty file is a new store.
	path := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	openStore(t, path, boltstore.Options{})
}
