package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// records returns n distinct records of varied sizes.
func records(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = bytes.Repeat([]byte(fmt.Sprintf("record-%d;", i)), 1+i%50)
	}
	return out
}

func checkSame(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read back %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d: read back %q, want %q", i, got[i], want[i])
		}
	}
}

func appendAll(t *testing.T, l interface{ Append([]byte) error }, recs [][]byte) {
	t.Helper()
	for _, r := range recs {
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
}

// Each adapter writes records and reads them back with its library's reader,
// so the benchmarks measure logs that work.
func TestAdaptersRoundTrip(t *testing.T) {
	recs := records(200)
	t.Run("streamwal", func(t *testing.T) {
		for _, sync := range []local.SyncPolicy{local.SyncAlways, local.SyncNone} {
			dir := t.TempDir()
			l, err := openStreamwal(dir, sync, 2)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range recs {
				if err := l.AppendTo(i%2, r); err != nil {
					t.Fatal(err)
				}
			}
			if syncs, _, _ := l.stats(); sync == local.SyncAlways && syncs == 0 {
				t.Error("no fdatasync counted with sync=always")
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l, err = openStreamwal(dir, sync, 2)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]byte
			for _, w := range l.wals[:1] {
				got, err = scanAll(w, len(recs)/2)
				if err != nil {
					t.Fatal(err)
				}
			}
			var want [][]byte
			for i := 0; i < len(recs); i += 2 {
				want = append(want, recs[i])
			}
			checkSame(t, got, want)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("pebble", func(t *testing.T) {
		for _, prezero := range []int64{0, 1 << 20} {
			for _, sync := range []bool{true, false} {
				path := filepath.Join(t.TempDir(), "000001.log")
				l, err := openPebble(path, prezero, sync)
				if err != nil {
					t.Fatal(err)
				}
				appendAll(t, l, recs)
				if n, _ := l.syncs(); sync && n == 0 {
					t.Error("no fdatasync counted")
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				got, err := readPebble(path)
				if err != nil {
					t.Fatal(err)
				}
				checkSame(t, got, recs)
			}
		}
	})
	t.Run("raw", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "raw")
		l, err := openRaw(path, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		appendAll(t, l, recs)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.Join(recs, nil); !bytes.HasPrefix(b, want) {
			t.Fatal("raw file does not start with the records")
		}
	})
	t.Run("etcd", func(t *testing.T) {
		for _, sync := range []bool{true, false} {
			dir := filepath.Join(t.TempDir(), "etcd")
			l, err := openEtcd(dir, sync)
			if err != nil {
				t.Fatal(err)
			}
			appendAll(t, l, recs)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := readEtcd(dir)
			if err != nil {
				t.Fatal(err)
			}
			checkSame(t, got, recs)
		}
	})
	t.Run("tidwall", func(t *testing.T) {
		for _, sync := range []bool{true, false} {
			dir := filepath.Join(t.TempDir(), "tidwall")
			l, err := openTidwall(dir, sync)
			if err != nil {
				t.Fatal(err)
			}
			appendAll(t, l, recs)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := readTidwall(dir)
			if err != nil {
				t.Fatal(err)
			}
			checkSame(t, got, recs)
		}
	})
}

// scanAll reads n messages from the start of w and returns their payloads.
func scanAll(w walimpls.WALImpl, n int) ([][]byte, error) {
	sc, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.All()})
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	out := make([][]byte, 0, n)
	for len(out) < n {
		m, ok := <-sc.Chan()
		if !ok {
			<-sc.Done()
			return out, fmt.Errorf("scanner ended after %d of %d messages: %v", len(out), n, sc.Error())
		}
		out = append(out, m.Payload())
	}
	return out, nil
}
