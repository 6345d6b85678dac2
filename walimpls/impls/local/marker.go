package local

import (
	"io"
	"os"

	"github.com/cockroachdb/errors"
)

// The journal marker records that the root's journal was written, so that
// recovery tells a root never written from one whose segment files were
// deleted (format.go, Directory and Recovery).
const (
	markerName     = "JOURNAL"
	markerTempName = "JOURNAL.tmp"
	markerContent  = "streamwal local journal\n"
)

// writeMarker writes the journal marker durably: its bytes go to a
// temporary file, which is synced and renamed into place, and the
// directory is synced. It is called once in a root's life, when a segment
// of the root is durable start frame included: by the flusher after its
// first fdatasync, or by recovery. A failure is not retried here; the
// temporary file it may leave is removed by the next recovery.
func (s *Store) writeMarker() error {
	tmp, name := s.path(markerTempName), s.path(markerName)
	f, err := s.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return errors.Wrapf(err, "local: create %s", tmp)
	}
	if _, err = f.WriteAt([]byte(markerContent), 0); err != nil {
		err = errors.Wrapf(err, "local: write %s", tmp)
	} else if err = f.Sync(); err != nil {
		err = errors.Wrapf(err, "local: sync %s", tmp)
	}
	if cerr := f.Close(); cerr != nil && err == nil {
		err = errors.Wrapf(cerr, "local: close %s", tmp)
	}
	if err != nil {
		return err
	}
	if err := s.fs.Rename(tmp, name); err != nil {
		return errors.Wrapf(err, "local: rename %s to %s", tmp, name)
	}
	if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
		return errors.Wrapf(err, "local: sync %s", s.cfg.Dir)
	}
	s.log.Info("journal marker written", "marker", name)
	return nil
}

// checkMarker reads the journal marker, which exists, and reports
// ErrCorrupt unless it holds exactly markerContent.
func (s *Store) checkMarker() error {
	name := s.path(markerName)
	f, err := s.fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return errors.Wrapf(err, "local: open %s", name)
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	size, err := f.Size()
	if err != nil {
		return errors.Wrapf(err, "local: size of %s", name)
	}
	if size == int64(len(markerContent)) {
		b := make([]byte, size)
		if n, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
			return errors.Wrapf(err, "local: read %s", name)
		}
		if string(b) == markerContent {
			return nil
		}
	}
	return errors.Wrapf(ErrCorrupt, "local: %s is not a journal marker (%d bytes, want the %d bytes %q): it was damaged, or another program wrote it",
		name, size, len(markerContent), markerContent)
}
