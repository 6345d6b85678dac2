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
//     messages from a shared in-memory write-ahead buffer (tailing);
//   - splitting of messages above the backend's size limit, and joining them
//     again for readers;
//   - retries of retryable append errors, fencing response and metrics.
package adaptor
