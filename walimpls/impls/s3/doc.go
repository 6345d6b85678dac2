// Package s3 is the object-storage backend: every channel's log is a
// sequence of objects in an S3-compatible bucket, written by one writer at
// a time, fenced by conditional writes alone (create-only PUTs with
// If-None-Match: *, and If-Match for the one object that is replaced, the
// channel's manifest). No lease, lock or coordinator is needed: a store
// that honours conditional writes atomically is the whole fence, and the
// backend proves that at open before it trusts it.
//
// This page is the format and the protocol; the code follows it. All
// integers in objects are big-endian; all keys are under Config.Prefix
// (default "streamwal/") in Config.Bucket.
//
// # Keys
//
//	<prefix><channel>/manifest                  the channel's manifest (JSON, below): replaced by If-Match only
//	<prefix><channel>/e<epoch>/<slot>           a flush of the writer of epoch <epoch>, or a fence
//	<prefix><channel>/e<epoch>/hint             the last slot that writer acknowledged, now and then (advisory)
//	<prefix>_probe/<random>                     the scratch key of the open-time probe (deleted after it)
//
// <epoch> and <slot> are 20-digit zero-padded decimals, so that a
// listing's byte order is the log's order. An epoch is one ReadWrite open:
// every open of a channel gets the next epoch number, from the manifest,
// and writes only under its own epoch, from slot 0 up, one object per
// slot. Epoch numbers never repeat for a channel name, across Delete too
// (the manifest outlives a Delete as a tombstone that keeps the counter),
// so a writer of a deleted channel can never write into a later channel
// of the same name.
//
// # The manifest
//
// One JSON object per channel:
//
//	{"v":1,"channel":"orders","term":7,"nextEpoch":12,
//	 "epochs":[{"epoch":10,"term":6,"sealed":true,"end":41},{"epoch":11,"term":7}],
//	 "truncated":{"epoch":10,"slot":3,"index":5}}
//
// Its fields:
//
//   - term: the highest term that opened the channel; an open below it is
//     refused (walimpls.ErrFenced) and writes nothing.
//   - epochs: the epochs kept, oldest first, with the term that opened
//     each. A sealed epoch has its last slot in end (-1: it wrote none),
//     recorded by the open that fenced it; only the last epoch is open
//     (not sealed). Terms never decrease along the list; epochs wholly
//     before the truncation point are dropped from it.
//   - truncated: the first message kept (an ID, below); every position
//     before it is gone (walimpls.ErrPositionGone), whatever objects the
//     store still holds.
//   - deleted: a tombstone left by Delete; the next open starts an empty
//     channel at any term, with the next epoch number.
//
// The manifest is written only by opens, truncations and deletes (never
// per append), each time with If-Match on the ETag read (or If-None-Match:
// * to create it): two writers that read one version cannot both replace
// it, and a write on a stale read fails with 412 and is decided again on
// a fresh read.
//
// # An object
//
// A flush or a fence is one object, written create-only (If-None-Match: *),
// with user metadata streamwal-kind (data | fence), streamwal-term,
// streamwal-count (records in it) and streamwal-nonce (16 random bytes in
// hex, the same for every retry of one flush):
//
//	object  := header record* trailer
//	header  := "SWL1" | kind u8 (1 data, 2 fence) | 0 u8 | 0 u16 |
//	           epoch u64 | term i64 | slot u64 | count u32 | nonce [16]byte
//	record  := nprops u32 | (klen u16 | key | vlen u32 | value)* |
//	           plen u32 | payload
//	trailer := crc u32      // CRC-32C (Castagnoli) of every byte before it
//
// A record is one message: every property as a string (user properties
// and the reserved "_" keys that carry its kind, term and timetick, as
// message.Properties.Pairs gives them), then its payload. A fence has no
// record. One AppendBatch is never split across objects: a batch is stored
// whole or not at all (walimpls.Capabilities.AtomicBatch). A reader that
// finds a bad magic, version, CRC or an epoch/slot that does not match the
// key fails its scanner with an error naming the key; it never skips.
//
// # IDs
//
// A message's ID is (epoch, slot, index): the object it is in and its
// place there. IDs order by epoch, then slot, then index; their string
// form is "<epoch>.<slot>.<index>" in canonical decimal (no sign, no
// leading zeros), and nothing else decodes.
//
// # Opening ReadWrite at term T (fencing)
//
//  1. GET the manifest (404: a new channel).
//  2. T below its term: ErrFenced, nothing written.
//  3. Seal the open epoch e, if any: find its first empty slot m (the
//     tail, below) and create-only PUT a fence object at e/m. A 412 there
//     means a late flush of e's writer landed (GET: data), so try m+1; or
//     a concurrent open fenced it (a fence), which is as good. From the
//     fence on, e's writer cannot write at m, and it acknowledges slots in
//     order only, so it acknowledges nothing at or after m.
//  4. Replace the manifest (If-Match): e sealed with end m-1, a new open
//     epoch n = nextEpoch at term T, nextEpoch n+1, term T. A 412 means
//     another open or a truncation changed it: back to 1 (a higher term
//     there makes this open ErrFenced; the same term is taken over again:
//     the later open wins).
//  5. The WAL writes under epoch n from slot 0.
//
// Requests: 1 GET + the tail search + 1 PUT (fence) + 1 PUT (manifest),
// independent of the log's length; a new channel, 1 GET + 1 PUT.
//
// Finding the tail of an epoch: GET its hint (the last slot its writer
// acknowledged, written every Config.HintEvery slots), then HEAD slots
// hint+1, hint+2, hint+4, ... until one is missing and binary-search
// between: about 2·log2(HintEvery) HEADs at most, whatever the log's
// length. No LIST.
//
// # The writer: group commit and ordered acknowledgements
//
// Appends (each AppendBatch, or AppendBatchAsync) queue in the WAL's
// flusher. A flush takes the queued batches (whole) into one object at the
// next slot when the oldest has waited Config.FlushInterval, or when they
// hold Config.FlushBytes or Config.FlushRecords; up to Config.MaxInflight
// flushes are in flight at once, and at most Config.MaxBufferedBytes wait
// or fly (an append beyond it waits: backpressure, not growth). An idle
// WAL makes no request at all.
//
// A flush is acknowledged once its PUT succeeded and every flush of a
// lower slot was acknowledged: acknowledgements are in slot order. When a
// flush fails, every flush after it fails too, also those whose PUT
// succeeded (their objects lie after a slot that stays empty or is fenced,
// and no reader delivers them), and the WAL is done: a 412 from another
// writer's object makes it fenced (walimpls.ErrFenced), anything else
// failed (its appends' outcome unknown). A PUT retried after a timeout
// that meets 412 HEADs the key: its own nonce there means its earlier try
// landed, and the flush succeeded.
//
// Transient failures (500, 503 SlowDown, timeouts, dropped connections)
// are retried by the client with backoff, within Config.MaxAttempts; the
// backend itself does not retry beyond that.
//
// # Reading
//
// A scanner reads the epochs the manifest lists, in order: each sealed
// epoch from its first slot to its end, then the open epoch slot by slot
// until a slot is missing. Slots after a sealed epoch's end are never
// read: a zombie's late flush, or the fence, is invisible there. A
// missing slot of the open epoch is the end for now: the scanner waits,
// then looks again (it also reads the manifest again, to learn of a seal,
// a truncation or a delete). Every object is checked (CRC, epoch, slot)
// before any of its messages is delivered.
//
// Tailing scanners of one channel in one Opener share one poller: it looks
// for the next slot at most every Config.PollInterval while a scanner
// waits, and hands what it fetched to all of them. Flushes of a writer in
// the same Opener reach its scanners without a GET. Catching up, a
// scanner fetches up to Config.ReadAhead objects in parallel, within
// Config.ReadAheadBytes.
//
// # Truncating and deleting
//
// Truncate(id) replaces the manifest (If-Match, conditional on this WAL's
// epoch still being the open one: a fenced WAL removes nothing) with
// truncated = id, then deletes with DeleteObjects the objects wholly
// before it: the data slots of earlier epochs and of id's epoch below its
// slot. Fence objects are never deleted, so a stalled writer of a sealed
// epoch can never fill a slot truncation emptied: its next slot is at or
// before its fence. Objects a fenced writer wrote after its fence
// (flushes it had in flight) are not in the manifest; Delete removes them.
//
// Why fences are safe to keep and slots safe to delete: a writer puts
// slots in increasing order and never again at a slot it was answered
// for, so a stalled writer of a sealed epoch can only ever write at or
// after the first slot it was not answered for, which is at or after its
// fence; the slots truncation deletes (each sealed epoch's 0..end, known
// from the manifest) are below it. (A retry of a PUT whose first try
// landed may recreate a deleted slot; it lies before the truncation point,
// where no reader looks, and that write was stored before the truncation
// anyway.)
//
// Delete(name) seals the open epoch like an open, with a fence that says
// so (streamwal-deleted: true), writes the tombstone (deleted, the epoch
// counter kept), then lists the channel's keys and deletes every one but
// the manifest and the fences: in each epoch's listing, the fence is the
// highest slot whose HEAD says fence (a stalled writer's flushes in
// flight may lie just above it). Delete is the only operation that lists.
// A WAL of the same Opener is fenced with Deleted set at once; one of
// another process learns it from the fence its next flush meets.
//
// # Proving the store fences
//
// New checks the bucket (HeadBucket: a wrong bucket, credentials or
// permissions fail with one line naming the endpoint, bucket and what the
// store answered), then races Config.ProbeRacers create-only PUTs to a
// fresh scratch key: exactly one must succeed and every other get 412;
// then an If-Match with a wrong ETag must get 412 and one with the right
// ETag succeed. A store that fails any of it is refused with an error
// naming the endpoint and what it lacks. Config.Unfenced opts out, for a
// single writer: the backend then declares no fencing (the adaptor's log
// fence alone protects readers), and says so in the log at open.
//
// # Defaults and what they cost
//
// FlushInterval 200 ms, FlushBytes 4 MiB, FlushRecords 10,000,
// MaxInflight 4, MaxBufferedBytes 64 MiB, HintEvery 64, PollInterval
// 200 ms, ReadAhead 8 objects within 32 MiB, MaxAttempts 5, ProbeRacers 8,
// MaxMessageBytes 16 MiB (the adaptor splits larger messages). At S3
// Standard prices (PUT $0.005, GET and HEAD $0.0004 per 1,000; a 30-day
// month is 2,592,000 s): a channel written to all the time makes at most
// 5 PUTs/s, $64.80 a month (50 ms: $259.20; 1 s: $12.96), plus a hint
// every 64 flushes (1.6%); written faster than 4 MiB per interval, one
// PUT per 4 MiB (0.25 PUT per MiB); idle, nothing. A tailing reader in
// another process makes at most 5 GETs/s while it waits, $5.18 a month.
//
// # Credentials
//
// From the usual AWS chain (environment, shared files, instance roles) or
// Config.CredentialsFile (a shared-credentials file, Config.Profile). They
// never appear in a chain's recorded Params (Describe: endpoint, bucket,
// prefix, region, path style), in logs or in errors.
package s3
