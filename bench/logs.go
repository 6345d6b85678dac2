package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2/record"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	twal "github.com/tidwall/wal"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// Every log below is safe for concurrent use: Append returns once the log
// acknowledged the record - after the fdatasync that covers it when the log
// syncs.

// streamwalLog is streamwal's local backend with one or more channels.
type streamwalLog struct {
	dir   string
	store *local.Store
	wals  []walimpls.WALImpl
	reg   *prometheus.Registry
}

func openStreamwal(dir string, sync local.SyncPolicy, channels int) (*streamwalLog, error) {
	reg := prometheus.NewRegistry()
	s, err := local.New(context.Background(), local.Config{Dir: dir, Sync: sync}, walimpls.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	l := &streamwalLog{dir: dir, store: s, reg: reg}
	for i := range channels {
		w, err := s.Open(context.Background(), walimpls.Channel{Name: fmt.Sprintf("bench-%d", i), Term: 1})
		if err != nil {
			_ = l.Close()
			return nil, err
		}
		l.wals = append(l.wals, w)
	}
	return l, nil
}

// Append appends p to the first channel.
func (l *streamwalLog) Append(p []byte) error { return l.AppendTo(0, p) }

// AppendTo appends p to channel ch.
func (l *streamwalLog) AppendTo(ch int, p []byte) error {
	m, err := message.New(p, nil)
	if err != nil {
		return err
	}
	_, err = walimpls.Append(context.Background(), l.wals[ch], m)
	return err
}

// stats returns the store's fdatasync count, their mean duration in seconds
// and the records per flush round, from its metrics.
func (l *streamwalLog) stats() (syncs, syncSeconds, recordsPerFlush float64) {
	mfs, err := l.reg.Gather()
	if err != nil {
		return 0, 0, 0
	}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 0 || mf.GetMetric()[0].GetHistogram() == nil {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		switch mf.GetName() {
		case "streamwal_local_fdatasync_seconds":
			syncs = float64(h.GetSampleCount())
			if syncs > 0 {
				syncSeconds = h.GetSampleSum() / syncs
			}
		case "streamwal_local_flush_records":
			if h.GetSampleCount() > 0 {
				recordsPerFlush = h.GetSampleSum() / float64(h.GetSampleCount())
			}
		}
	}
	return syncs, syncSeconds, recordsPerFlush
}

func (l *streamwalLog) Close() error {
	for _, w := range l.wals {
		_ = w.Close()
	}
	return l.store.Close()
}

// dataFile is an *os.File whose Sync is fdatasync, as pebble's vfs does on
// Linux.
type dataFile struct{ *os.File }

func (f dataFile) Sync() error { return unix.Fdatasync(int(f.Fd())) }

// createFile creates path, first writing and syncing prezero zero bytes
// over it when prezero > 0 (as a recycled or pre-zeroed log file is), and
// leaves the file offset at 0.
func createFile(path string, prezero int64) (dataFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return dataFile{}, err
	}
	df := dataFile{f}
	if prezero > 0 {
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < prezero; off += int64(len(zeros)) {
			if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), prezero-off)], off); err != nil {
				_ = f.Close()
				return dataFile{}, err
			}
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return dataFile{}, err
		}
	}
	return df, nil
}

// pebbleLog is pebble's record.LogWriter used the way pebble's commit
// pipeline uses it: appenders serialize on a mutex to queue a record, and
// wait outside it on a WaitGroup that the LogWriter's flush loop releases
// after the fdatasync that covers the record (its group commit).
type pebbleLog struct {
	mu    sync.Mutex
	lw    *record.LogWriter
	sync  bool
	sem   chan struct{} // bounds the LogWriter's sync queue; its flush loop releases
	fsync prometheus.Histogram
}

func openPebble(path string, prezero int64, sync bool) (*pebbleLog, error) {
	f, err := createFile(path, prezero)
	if err != nil {
		return nil, err
	}
	l := &pebbleLog{
		sync:  sync,
		sem:   make(chan struct{}, 4096),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pebble_wal_fsync"}),
	}
	l.lw = record.NewLogWriter(f, 1, record.LogWriterConfig{
		WALFsyncLatency:     l.fsync,
		QueueSemChan:        l.sem,
		WriteWALSyncOffsets: func() bool { return true },
	})
	return l, nil
}

func (l *pebbleLog) Append(p []byte) error {
	if !l.sync {
		l.mu.Lock()
		_, err := l.lw.WriteRecord(p)
		l.mu.Unlock()
		return err
	}
	var (
		wg      sync.WaitGroup
		syncErr error
	)
	wg.Add(1)
	l.sem <- struct{}{} // as pebble's commit pipeline does before queueing a sync
	l.mu.Lock()
	_, err := l.lw.SyncRecord(p, &wg, &syncErr)
	l.mu.Unlock()
	if err != nil {
		<-l.sem
		return err // the record was not queued
	}
	wg.Wait()
	return syncErr
}

// syncs returns how many fdatasyncs the LogWriter issued and their mean
// duration in seconds.
func (l *pebbleLog) syncs() (n, seconds float64) {
	var m dto.Metric
	if err := l.fsync.Write(&m); err != nil {
		return 0, 0
	}
	h := m.GetHistogram()
	if h.GetSampleCount() == 0 {
		return 0, 0
	}
	// The LogWriter observes nanoseconds.
	return float64(h.GetSampleCount()), h.GetSampleSum() / 1e9 / float64(h.GetSampleCount())
}

func (l *pebbleLog) Close() error { return l.lw.Close() }

// readPebble returns the records of the log file at path.
func readPebble(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := record.NewReader(f, 1)
	var out [][]byte
	for {
		rr, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		b, err := io.ReadAll(rr)
		if err != nil {
			return out, err
		}
		out = append(out, b)
	}
}

// rawLog is the baseline: one write and one fdatasync per record, into a
// pre-zeroed file (the cheapest kind of fdatasync), serialized by a mutex.
// It wraps around to offset 0 at the end of the pre-zeroed space.
type rawLog struct {
	mu   sync.Mutex
	f    dataFile
	off  int64
	size int64
}

func openRaw(path string, prezero int64) (*rawLog, error) {
	f, err := createFile(path, prezero)
	if err != nil {
		return nil, err
	}
	return &rawLog{f: f, size: prezero}, nil
}

func (l *rawLog) Append(p []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.off+int64(len(p)) > l.size {
		l.off = 0
	}
	if _, err := l.f.WriteAt(p, l.off); err != nil {
		return err
	}
	if err := l.f.Sync(); err != nil {
		return err
	}
	l.off += int64(len(p))
	return nil
}

func (l *rawLog) Close() error { return l.f.Close() }

// etcdLog is etcd's WAL: one Save of one raft entry per record. Without
// sync it uses SetUnsafeNoFsync, so Save writes to the kernel and returns.
type etcdLog struct {
	mu    sync.Mutex
	w     *wal.WAL
	index uint64
}

func openEtcd(dir string, sync bool) (*etcdLog, error) {
	w, err := wal.Create(zap.NewNop(), dir, nil)
	if err != nil {
		return nil, err
	}
	if !sync {
		w.SetUnsafeNoFsync()
	}
	return &etcdLog{w: w}, nil
}

func (l *etcdLog) Append(p []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	index, term := l.index+1, uint64(1)
	if err := l.w.Save(nil, []*raftpb.Entry{{Index: &index, Term: &term, Data: p}}); err != nil {
		return err
	}
	l.index = index
	return nil
}

func (l *etcdLog) Close() error { return l.w.Close() }

// readEtcd returns the entries' data of the WAL in dir.
func readEtcd(dir string) ([][]byte, error) {
	w, err := wal.Open(zap.NewNop(), dir, nil)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	_, _, ents, err := w.ReadAll()
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(ents))
	for i, e := range ents {
		out[i] = e.GetData()
	}
	return out, nil
}

// tidwallLog is tidwall/wal: one Write per record, NoSync when not syncing.
type tidwallLog struct {
	mu    sync.Mutex
	l     *twal.Log
	index uint64
}

func openTidwall(dir string, sync bool) (*tidwallLog, error) {
	opts := *twal.DefaultOptions
	opts.NoSync = !sync
	l, err := twal.Open(dir, &opts)
	if err != nil {
		return nil, err
	}
	return &tidwallLog{l: l}, nil
}

func (l *tidwallLog) Append(p []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.l.Write(l.index+1, p); err != nil {
		return err
	}
	l.index++
	return nil
}

func (l *tidwallLog) Close() error { return l.l.Close() }

// readTidwall returns the records of the log in dir.
func readTidwall(dir string) ([][]byte, error) {
	l, err := twal.Open(dir, nil)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	first, err := l.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := l.LastIndex()
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for i := first; i != 0 && i <= last; i++ {
		b, err := l.Read(i)
		if err != nil {
			return out, err
		}
		out = append(out, b)
	}
	return out, nil
}

// segmentFiles lists the segment files of a streamwal root, in order.
func segmentFiles(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "wal-*.log"))
}
