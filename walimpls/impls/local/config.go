package local

import (
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"

	"github.com/streamwal/streamwal/walimpls"
)

// Name is the backend's name in configuration and in its IDs.
const Name = "local"

// SyncPolicy says when the flusher calls fdatasync.
type SyncPolicy string

const (
	// SyncAlways acknowledges an append only after the fdatasync that covers
	// it. Nothing acknowledged is lost by a crash of the process or of the
	// machine. The default.
	SyncAlways SyncPolicy = "always"
	// SyncInterval acknowledges an append once it is written to the kernel
	// and syncs every Config.SyncInterval. A process crash loses nothing
	// acknowledged; a machine crash may lose up to the last interval.
	SyncInterval SyncPolicy = "interval"
	// SyncNone acknowledges an append once it is framed into the
	// journal's write buffer (the flusher writes it right after, in the
	// background) and syncs only term and truncate records, segment
	// switches and Close. For data that is replicated elsewhere or can be
	// rebuilt: a machine crash may lose any unsynced tail, and a process
	// crash the acknowledged records not yet written (at most twice
	// MaxBatchBytes).
	SyncNone SyncPolicy = "none"
)

// Defaults for the zero values of Config.
const (
	DefaultSegmentBytes    = 64 << 20
	DefaultMaxMessageBytes = 8 << 20
	DefaultSyncInterval    = 10 * time.Millisecond
	DefaultReadAheadBytes  = 1 << 20
	DefaultMaxBatchBytes   = 4 << 20
	DefaultSlowSync        = time.Second
	// DefaultDiskSoftWriteRate is the pace of appends below the soft
	// watermark (RocksDB's delayed_write_rate has the same default).
	DefaultDiskSoftWriteRate = 16 << 20
	DefaultDiskCheckInterval = 500 * time.Millisecond
	// DiskWatermarkOff, as Config.DiskSoftFreeBytes or
	// Config.DiskHardFreeBytes, turns that watermark off.
	DiskWatermarkOff = -1

	minSegmentBytes = 64 << 10
	// segmentSlack leaves room in a segment for its start frame and the
	// frame headers.
	segmentSlack = 8 << 10
	// maxSegmentBytes keeps offsets inside the frame header's 32 bits.
	maxSegmentBytes = 1 << 30
)

// Config is the local backend's settings. The zero value of every field but
// Dir takes the documented default.
type Config struct {
	// Dir is the root directory; it is created if missing. Required.
	Dir string `yaml:"dir" json:"dir"`
	// FS does the store's file I/O (code only; tests inject errors and
	// crashes through it). Nil is the operating system's.
	FS FS `yaml:"-" json:"-"`
	// SegmentBytes is the size of each segment file (default 64 MiB,
	// 64 KiB to 1 GiB). It must hold at least two messages of
	// MaxMessageBytes plus 8 KiB. It also bounds a batch (AppendBatch): a
	// batch is stored in one segment, and one whose frames do not fit in an
	// empty segment is ErrTooLarge. It may change between opens of a root:
	// every segment records the size it was started with, the segments
	// already written keep theirs (the one being written is filled up to
	// its own size), the next ones take the new size, and Open logs both
	// sizes at Info.
	SegmentBytes int64 `yaml:"segmentBytes" json:"segmentBytes"`
	// Sync is the sync policy: "always" (default), "interval" or "none".
	Sync SyncPolicy `yaml:"sync" json:"sync"`
	// SyncInterval is how often, with the "interval" sync policy, the
	// flusher fdatasyncs what it has written since the last sync: appends
	// are acknowledged once written, and a machine crash may lose those of
	// about the last interval. Other policies ignore it. Default 10ms.
	SyncInterval time.Duration `yaml:"syncInterval" json:"syncInterval"`
	// MaxMessageBytes is the largest Message.Size accepted (default 8 MiB).
	MaxMessageBytes int `yaml:"maxMessageBytes" json:"maxMessageBytes"`
	// ReadAheadBytes bounds what a scanner reads ahead of its consumer when
	// its ReadOption does not say (default 1 MiB). A scanner reads at most
	// 1 MiB (or one larger message) at a time whatever its read-ahead:
	// larger chunks fall out of the CPU's caches.
	ReadAheadBytes int `yaml:"readAheadBytes" json:"readAheadBytes"`
	// MaxBatchBytes bounds the bytes one flush round writes (default 4 MiB);
	// a single larger record, or a larger batch of AppendBatch, is written
	// alone. Submitters wait while the
	// pending batch is full, so it also bounds how far SyncNone appends run
	// ahead of the writes.
	MaxBatchBytes int `yaml:"maxBatchBytes" json:"maxBatchBytes"`
	// SlowSync is the fdatasync duration above which a warning is logged
	// (default 1s).
	SlowSync time.Duration `yaml:"slowSync" json:"slowSync"`
	// DiskSoftFreeBytes is the soft watermark of free space on the root's
	// file system: below it, appends are throttled to DiskSoftWriteRate
	// (doc.go, Disk space). Default four times DiskHardFreeBytes (8 ×
	// SegmentBytes, 512 MiB, with the defaults), or 8 × SegmentBytes when
	// the hard watermark is off. At least DiskHardFreeBytes;
	// DiskWatermarkOff (-1) turns it off.
	DiskSoftFreeBytes int64 `yaml:"diskSoftFreeBytes" json:"diskSoftFreeBytes"`
	// DiskHardFreeBytes is the hard watermark: below it, appends are
	// refused with ErrDiskFull, while opens, truncations and deletes still
	// go through, and no spare segment is prepared ahead of need. Default
	// 2 × SegmentBytes (128 MiB): room for the segment switches of the
	// records that are never refused. At least SegmentBytes;
	// DiskWatermarkOff (-1) turns it off. With both watermarks off the
	// free space is never read.
	DiskHardFreeBytes int64 `yaml:"diskHardFreeBytes" json:"diskHardFreeBytes"`
	// DiskSoftWriteRate is the pace, in frame bytes per second, at which
	// appends are let through below the soft watermark (default 16 MiB/s).
	DiskSoftWriteRate int64 `yaml:"diskSoftWriteRate" json:"diskSoftWriteRate"`
	// DiskCheckInterval is how often, at most, the free space is read
	// while the journal writes, and how often it is read again while it is
	// below a watermark, idle or not (default 500ms). It is also read
	// before and after every spare segment is zero-filled, and after
	// truncated segments are deleted.
	DiskCheckInterval time.Duration `yaml:"diskCheckInterval" json:"diskCheckInterval"`

	// clock (walimpls.WithClock) schedules the "interval" sync policy (the
	// flusher's SyncInterval ticker and the time since its last sync), the
	// disk checks (DiskCheckInterval) and the pace of throttled appends.
	// How long an fdatasync takes - the sync-latency histogram and the
	// SlowSync warning - is always measured on the real clock: it is the
	// device's time, which a fake clock would not see pass.
	clock clockwork.Clock
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.Sync == "" {
		c.Sync = SyncAlways
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.ReadAheadBytes == 0 {
		c.ReadAheadBytes = DefaultReadAheadBytes
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.SlowSync == 0 {
		c.SlowSync = DefaultSlowSync
	}
	if c.DiskHardFreeBytes == 0 {
		c.DiskHardFreeBytes = 2 * c.SegmentBytes
	}
	if c.DiskSoftFreeBytes == 0 {
		c.DiskSoftFreeBytes = 4 * c.DiskHardFreeBytes
		if c.DiskHardFreeBytes == DiskWatermarkOff {
			c.DiskSoftFreeBytes = 8 * c.SegmentBytes
		}
	}
	if c.DiskSoftWriteRate == 0 {
		c.DiskSoftWriteRate = DefaultDiskSoftWriteRate
	}
	if c.DiskCheckInterval == 0 {
		c.DiskCheckInterval = DefaultDiskCheckInterval
	}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	return c
}

// Validate reports an ErrInvalidConfig error for settings the backend cannot
// use. Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	d := c.withDefaults()
	bad := func(format string, args ...any) error {
		return errors.Wrapf(walimpls.ErrInvalidConfig, "local: "+format, args...)
	}
	switch {
	case c.Dir == "":
		return bad("dir is required")
	case d.SegmentBytes < minSegmentBytes || d.SegmentBytes > maxSegmentBytes:
		return bad("segmentBytes %d outside [%d, %d]", d.SegmentBytes, minSegmentBytes, maxSegmentBytes)
	case d.Sync != SyncAlways && d.Sync != SyncInterval && d.Sync != SyncNone:
		return bad("sync %q is not one of always, interval, none", d.Sync)
	case d.SyncInterval < 0:
		return bad("negative syncInterval %s", d.SyncInterval)
	case d.MaxMessageBytes < 0:
		return bad("negative maxMessageBytes %d", d.MaxMessageBytes)
	case 2*int64(d.MaxMessageBytes)+segmentSlack > d.SegmentBytes:
		return bad("maxMessageBytes %d does not fit twice in segmentBytes %d (with %d bytes to spare)", d.MaxMessageBytes, d.SegmentBytes, segmentSlack)
	case d.ReadAheadBytes < 0:
		return bad("negative readAheadBytes %d", d.ReadAheadBytes)
	case d.MaxBatchBytes < 0:
		return bad("negative maxBatchBytes %d", d.MaxBatchBytes)
	case d.SlowSync < 0:
		return bad("negative slowSync %s", d.SlowSync)
	case d.DiskHardFreeBytes < DiskWatermarkOff:
		return bad("diskHardFreeBytes %d is neither a size nor -1 (off)", d.DiskHardFreeBytes)
	case d.DiskSoftFreeBytes < DiskWatermarkOff:
		return bad("diskSoftFreeBytes %d is neither a size nor -1 (off)", d.DiskSoftFreeBytes)
	case d.DiskHardFreeBytes != DiskWatermarkOff && d.DiskHardFreeBytes < d.SegmentBytes:
		return bad("diskHardFreeBytes %d is below segmentBytes %d: a segment switch below the watermark could run out of space", d.DiskHardFreeBytes, d.SegmentBytes)
	case d.DiskSoftFreeBytes != DiskWatermarkOff && d.DiskSoftFreeBytes < d.DiskHardFreeBytes:
		return bad("diskSoftFreeBytes %d is below diskHardFreeBytes %d", d.DiskSoftFreeBytes, d.DiskHardFreeBytes)
	case d.DiskSoftWriteRate < 0:
		return bad("negative diskSoftWriteRate %d", d.DiskSoftWriteRate)
	case d.DiskCheckInterval < 0:
		return bad("negative diskCheckInterval %s", d.DiskCheckInterval)
	}
	return nil
}

// diskLevels returns the watermarks of c (with its defaults), 0 for a
// watermark that is off, and the margin a reading must clear above a
// watermark to leave the state below it: one segment, the step in which
// the journal takes free space (a spare zero-filled) and gives it back (a
// truncated segment deleted), so that one such step does not flip the
// state back and forth.
func (c Config) diskLevels() diskLevels {
	l := diskLevels{margin: uint64(c.SegmentBytes)}
	if c.DiskSoftFreeBytes > 0 {
		l.soft = uint64(c.DiskSoftFreeBytes)
	}
	if c.DiskHardFreeBytes > 0 {
		l.hard = uint64(c.DiskHardFreeBytes)
	}
	return l
}
