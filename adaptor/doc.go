// Package adaptor turns a walimpls backend into a WAL worth embedding.
//
// A backend only stores, orders by ID and fences. The adaptor adds, once for
// every backend:
//
//   - timeticks: every message gets a hybrid timestamp (physical ms and a
//     logical counter), strictly increasing per channel and above every
//     timetick recovered from the log when the WAL opened;
//   - a term-begin message written first by every new owner: the log-level
//     fence. Scanners drop data messages whose term is below a term-begin they
//     have seen, so readers are safe even on a backend that cannot fence;
//   - watermarks: a timetick message stating that every message with a lower
//     or equal timetick is durable, appended periodically when the channel is
//     not idle and on demand (Sync);
//   - scanners that deliver messages in strictly increasing timetick order,
//     holding concurrent appends in a reorder buffer until a watermark
//     releases them, reading history from the backend (catch-up) and recent
//     messages from a shared in-memory tail cache (tailing);
//   - splitting of messages above the backend's size limit, and joining them
//     again for readers;
//   - retries of retryable append errors, fencing response and metrics.
//
// # Ordering and watermarks
//
// Every append takes a timetick and is tracked until the backend answers. A
// watermark W is allocated like a timetick (so later appends get timeticks
// above it) and appended only once no append with a timetick below W is in
// flight. Every acknowledged message with a timetick at or below W is
// therefore stored before W, and a scanner that reads W can release, in
// timetick order, everything it holds up to W. A data message read after a
// watermark that covers it was never acknowledged (an append abandoned on
// a cancelled context that the backend stored late): it is dropped and
// counted as late. A retried append keeps its timetick, so a duplicate
// stored by an ambiguous retry is dropped too.
//
// # Local releases
//
// On a backend that fences, the scanners of the writing WAL do not wait for
// a watermark in the log: the writer knows which appends have ended, and
// releases a timetick L to them once every append at or below L has ended
// and each one that may be delivered is in the tail cache (its
// last record read by the tail reader). What they deliver below L is then
// what every other reader delivers below it at the next watermark. An
// append whose outcome is unknown may still be stored before that
// watermark, where others would deliver it: the release point stops below
// it until a watermark above it is written. Local releases stop when the
// WAL is fenced (what the tail reader reads next may be another writer's).
// Other readers — read-only WALs, other processes, and every reader on a
// backend that cannot fence — follow watermarks only: their lag is up to
// Options.TimeTickInterval, or until Sync.
//
// # Terms in the log
//
// A read-write Open reads the log up to its last message (walimpls
// WALImpl.Last) before it writes anything: when a higher term already began
// there, the open fails with walimpls.ErrFenced and leaves nothing in the
// log, so that term-begins in the log only go forward, also on a backend
// that cannot fence. It then appends its term-begin and reads on to it, to
// recover the highest timetick.
//
// On a backend that fences, that read covers only the end of the log
// (cursor.Tail): 256 messages, then 8 times more, until the window
// proves that nothing before it holds a higher timetick or term — a
// term-begin followed by a timetick of its owner, or two watermarks of one
// owner (every message stored before the first has a timetick below the
// second). Open time then depends on the watermark spacing
// (WatermarkBytes, TimeTickInterval), not on how much the log retains. It
// relies on what fencing guarantees (once an open succeeds, earlier writers
// store nothing more, so each owner's stretch of the log follows its
// term-begin) and on each writer's appends being stored in the order they
// were made. On a backend that cannot fence, a stale writer's messages may
// follow a newer term-begin anywhere, and Open reads the whole kept log.
//
// A term-begin carries no timetick: it is a position. Scanners learn the
// highest term that began before their start position from what the WAL has
// read (the log up to its own term-begin when it opened read-write, and
// everything its tail reader reads since) and from what they read
// themselves; a data message, part or watermark of a lower term that comes
// after a higher term-begin is dropped and counted, and so is a term-begin
// below one already seen (an open that lost a race on a backend that cannot
// fence): readers never see terms go backwards. When asked to deliver
// term-begins (Filter.Kinds), a scanner delivers one right before the first
// released message of its term, so that nothing of a lower term follows it.
// A read-only WAL reads no history when it opens: its scanners learn terms
// only from what they and its tail reader read.
//
// One term has one writer. A later read-write open of the same term takes
// the channel over (the backend contract's same-term rule), and the earlier
// WAL becomes unavailable as soon as the backend refuses it or its tail
// reader (where one runs: see Inside a WAL) reads the later term-begin. On a backend that cannot fence, the
// log cannot tell two writers of one term apart: there, whoever assigns
// terms must never hand one term to two live writers.
//
// # Outcomes of a failed append
//
// An Append that returns nil is stored, and every scanner delivers it. An
// Append that fails either certainly will never be delivered —
// walimpls.NotStored(err) is true: it was refused before it reached the
// backend (a WAL already fenced or closed, a context already done, a message
// too large), or what reached the backend can never be read back whole (a
// split message whose last part was never sent, an append stored after the
// term-begin that fenced it) — or its outcome is unknown: it may be stored
// and delivered later (a context cancelled or a WAL closed while the backend
// was writing it, a fence that raced it, a retry after an attempt of unknown
// outcome). Re-sending an append of unknown outcome on the new owner can
// store it twice.
//
// The log resolves it: every append of term T that readers deliver lies
// before the first term-begin of a higher term. To learn which of its
// ambiguous appends a fenced owner stored, read the channel from a position
// before them (a checkpoint) with Filter.Kinds holding KindData and
// KindTermBegin: the messages of term T delivered before the term-begin of
// the new term (walimpls.FencedError.CurrentTerm, or any higher one) are
// exactly the ones stored; nothing of term T is delivered after it. Give
// each message an identity of your own (a property) to match them.
//
// # Backends that cannot fence
//
// When the backend declares Capabilities.Fencing false (memory with fencing
// off, Kafka without transactions), a stale owner's appends still reach the
// log, and readers drop those after the new term-begin. So that Append
// never acknowledges such a message, the adaptor confirms every append on
// such a backend: it returns once the WAL's tail reader has read past the
// message, and fails it with ErrFenced (NotStored) if a term-begin that
// fences the WAL came before it. This costs each append the tail reader's
// latency; backends that fence skip it.
//
// # Resuming
//
// Delivery follows timeticks, not IDs: concurrent appends may be stored in
// another order than their timeticks. Each delivered message carries
// (message.Immutable.LastConfirmed) the position from which a new scanner
// finds every message with a higher timetick. Resume
// with cursor.StartFrom(that position) and Filter.TimeTickAbove set to the
// last delivered timetick.
//
// # Sealed logs
//
// A log that nothing acknowledged is appended to any more (a sealed
// segment of a chain: package chain) may end with appends no watermark
// covers: its writer was fenced before the next one. A scanner given the
// log's last position (ReadOption.Until) reads up to it and no further,
// releases what it holds there in timetick order, and ends with a nil
// Error; package chainread reads chains that way. A writer that continues
// such a channel on a new log takes the sealed log's highest timetick as
// its floor (Options.TimeTickFloor), so that timeticks keep increasing
// across the seal.
//
// # Memory
//
// The tail cache (shared by a WAL's tailing scanners) and each
// scanner's reorder buffer have byte budgets. The tail cache evicts
// its oldest messages and never blocks the writer; a scanner whose position
// was evicted reads the backend again from where it was. A scanner that is
// not read stops reading: it holds at most its reorder budget plus the
// backend's read-ahead. Watermarks every WatermarkBytes bound what a reorder
// buffer must hold; a scanner whose buffer still overflows (a writer that
// is not streamwal) ends with ErrScannerBufferFull instead of dropping.
// A catching-up scanner hands what a watermark releases to its own sender
// goroutine and reads on while the reader takes it; what is released and
// not yet taken counts against the same budget, and a tailing scanner reads
// no further until it was taken. A batch scanner (ReadBatches) hands over a
// chunk of up to 64 messages per receive; a chunk counts until the reader
// received it.
//
// # Truncation
//
// Truncate removes the log before a position on the backend. The WAL's
// tail cache may still hold removed messages: a scanner of this WAL
// that starts before the truncation point reads the backend, which answers
// ErrPositionGone, and a tailing scanner that the truncation overtakes ends
// with ErrPositionGone rather than hand out a removed message (it may still
// deliver what its reorder buffer already held). A read-only WAL on another
// node learns of the truncation only through the backend.
//
// # Inside a WAL
//
// A WAL is split by job, a file each, and each part guards its own state:
//
//   - recovery.go: what a read-write open learns from the end of the log
//     (the highest timetick and term, the term-begins), a function of what
//     the backend delivers; endWindow decides, as pure logic, when a suffix
//     of the log proves enough.
//   - append.go and retry.go, the writer: an append takes an in-flight
//     token, its timeticks (timeticks.go, which also tracks the appends in
//     flight and the local release point), is stamped and split (split.go),
//     stored with retries, confirmed by the tail reader on a backend that
//     cannot fence, and ends its timeticks with its outcome.
//   - tail.go, the tail reader and what it learned (tailLog, one lock): the
//     log copied into the tail cache (tailcache.go, one lock), the
//     term-begins read, the position confirmations wait for.
//   - watermark.go, the watermark writer (watermarker: one lock ordering
//     the writes, one for its schedule).
//   - scanner.go, scanread.go, scansend.go: a scanner's reading, ordering
//     and sending.
//   - wal.go: opening, closing, reading and truncating; the WAL's own mutex
//     guards only whether it is closed.
//
// Goroutines, and who stops them:
//
//   - the tail reader, one per WAL: Close ends it (the WAL's context) and
//     waits for it. Open starts it where appends must be confirmed (a
//     backend that cannot fence) or, on a read-only WAL of such a backend,
//     where every term-begin must be noted; elsewhere the WAL's first
//     scanner starts it, from the log's end: a WAL nobody reads reads
//     nothing back;
//   - a watermark write, only while one is due: the watermarker's timer
//     (Options.Clock) or a kick starts it, it ends after the write, and
//     Close stops the timer and waits for a write in flight. An idle WAL
//     holds no goroutine for its watermarks;
//   - the callback goroutine (utility/serial), from the first AppendAsync
//     on: Close waits for every callback, then ends it;
//   - one per append in flight where the backend cannot take it
//     asynchronously (no walimpls.AsyncAppender, or appends that must be
//     confirmed), and one per retry of an asynchronous append: counted in
//     the WAL's wait group, which Close waits for;
//   - per scanner, its reading and ordering goroutine and its sender
//     (catching up): the scanner's Close stops and waits for them, and the
//     WAL's Close closes every scanner first.
//
// # Costs
//
// Opening read-write recovers the highest timetick and term from the log.
// On a backend that fences it reads only the end of the log, so that open
// and takeover time do not grow with retention (BenchmarkOpen, a channel
// retaining 1 GiB against one retaining 10 MiB: 0.57 as long, median of 5
// runs; goal ≤ 1.5); on one that cannot fence it reads the whole kept log:
// truncate what consumers no longer need.
//
// An open, idle WAL holds no goroutine: no tail reader until someone reads
// (where the backend fences), no watermark goroutine between watermarks,
// no callback goroutine between callbacks. BenchmarkIdleChannels (10,000
// read-write channels on one local store, fsync on, 64 opens at a time,
// 2026-12-05): 0 goroutines and 3.5 KiB of heap per idle channel, all
// 10,000 opened in 1.4 s (goals ≤ 0.05, ≤ 16 KiB, < 5 s). A WAL given
// Metrics adds its series (about 8 KiB per channel).
//
// Against the raw backend under it (bench_test.go; adaptor ÷ raw measured
// in one run, raw and adaptor rounds alternating; 16 appenders of 1 KiB
// records, or one goroutine with 64 in flight for AppendAsync; a 2-CPU
// machine). Medians of 5 runs of make bench-table on 2026-12-05
// (COUNT=5 APPENDS=50000x), records/s ratio and, in brackets, the CPU
// ratio (raw CPU ÷ adaptor CPU per record), which the disk's writeback
// does not swing; "before" is what issue 21 was filed with:
//
//	row                               before  now          goal
//	Append local, fsync               0.99    0.95 (0.87)  ≥ 0.95
//	Append local, no sync             0.72    0.49 (0.60)  ≥ 0.9
//	Append memory                     0.62    0.75 (0.77)  ≥ 0.9
//	Append memory, no fencing         0.22    0.33 (0.34)  ≥ 0.6
//	AppendAsync memory                0.39    0.62 (0.58)  ≥ 0.85
//	AppendAsync local, no sync        0.38    0.49 (0.50)  ≥ 0.85
//	AppendAsync local, fsync          0.73    0.80 (0.65)  ≥ 0.85
//	Scan memory (Read)                0.79    1.24 (0.77)  ≥ 0.9
//	Scan local (Read)                 0.95    0.87 (0.73)  ≥ 0.9
//	ReadBatches memory                0.26    0.29         ≥ 0.8
//	ReadBatches local                 0.55    0.58         ≥ 0.8
//	Open 1 GiB ÷ 10 MiB               0.62    0.57         ≤ 1.5
//
// Single runs of one row still swing by 2-4 times (Append local without
// sync: 0.33-0.74 in the same table; a run alone gave 1.28, CPU 0.91), so
// the medians above are the figures, and what limits each row short of
// its goal is this:
//
//   - Appends read nothing back where the backend fences and nobody reads
//     the WAL: the tail reader starts with the first scanner. What is left
//     is the adaptor's bookkeeping per append (a token of the in-flight
//     bound, the timeticks, the stamp, the outcome), about 1 µs of CPU,
//     against a raw append of 3-5 µs on memory and local without sync.
//     With a scanner open, the tail reader reads every append back.
//   - On a backend that cannot fence, every append is confirmed by reading
//     it back (each woken once its position is passed). On memory the
//     read-back allocates a message and an ID per record, and the raw
//     benchmark's log only grows: within one benchmark process the ratio
//     falls from 0.6 (first run) to 0.3 as the collector marks an ever
//     larger heap. A backend that could tell positions without payloads
//     would confirm cheaper.
//   - AppendAsync: the backend's answer is queued on the WAL's callback
//     goroutine, which runs the append's completion and the caller's
//     callback: two hand-offs per append on 2 CPUs shared with the
//     backend's own goroutines.
//   - Scans and ReadBatches: the ordering goroutine handles each message
//     (its header, the log-level fence, a push into and a pop from the
//     reorder buffer until the watermark that releases it, the filter) and
//     hands it to the sender in chunks of 64, about 300 ns per message on
//     memory, where the raw batch scanner spends 70. ReadBatches compares
//     with the raw batch scanner, which hands the backend's slices over
//     untouched; the adaptor cannot pass them on as they are, since
//     delivery follows timeticks, not IDs, and waits for watermarks.
package adaptor
