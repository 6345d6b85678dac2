package chainwal

import "github.com/streamwal/streamwal/adaptor"

// OpenScanners counts the scanners w (a WAL this package opened) tracks.
func OpenScanners(w adaptor.WAL) int {
	cw := w.(*wal)
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return len(cw.scanners)
}
