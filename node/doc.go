// Package node is a streamwal node: it registers in a cluster under an etcd
// lease, opens the channels the coordinator assigns to it (at their
// assigned terms, through a walmanager.Manager over a backend) and removes
// the ones moved away, and serves the client API of proto/streamwal/v1
// (Connect, gRPC and gRPC-Web on one port) for the channels it owns, with
// Prometheus metrics on /metrics, its health on /healthz and its liveness
// stream on cluster.LivenessPath. cmd/walnode is its process.
//
// # Liveness
//
// The node listens before it registers and serves, on the same address, a
// liveness stream that the coordinator's leader holds open (liveness.go).
// When the process dies its kernel ends the stream and refuses the
// leader's next connection, and the leader moves the node's channels at
// once, before the lease expires; a stalled or partitioned node keeps them
// until its lease expires (package coordinator, "Failure detection").
// The registered address (Config.Advertise, or the listener's) must
// therefore reach this listener itself, not a proxy.
//
// A move's phases on the new owner are timed (phases.go): the backend's
// open, which fences the old owner (streamwal_node_open_phase_seconds
// {phase="fence"}, from the assignment seen), the rest of the WAL's open:
// the end of the log found, the term-begin and a first watermark written
// ({phase="tail"}), and the first append acknowledged at the new term
// (streamwal_node_first_append_seconds, from the WAL ready). The Opened
// report carries the same times (Seen, Fenced, Ready).
//
// # Ownership
//
// The node obeys the assignments: an assignment naming it at term T makes
// it open the channel at T and report Opened under its lease; an assignment
// naming another node makes it remove the channel. It never decides a
// term. When a channel moves, the new owner's open fences this node's WAL
// in the backend, so an append this node still takes after the move fails
// (ErrFenced) even if it never hears of the move; the lease only tells the
// coordinator when to move.
//
// # Authorization
//
// With Config.Authz the node refuses every request its policy does not
// grant (authz.go; package security/authz defines the policy and the
// mapping): a connect interceptor decides each RPC from its decoded
// request before the service sees it, so a refused request never reaches
// the WAL; /metrics and /admin/channels are checked in front of their
// handlers; /healthz stays open, and with TLS the liveness stream takes
// only a verified node's certificate (none, when the API verifies no
// client certificates). A refusal is
// Unauthenticated or PermissionDenied, and for an append carries the
// not_stored outcome. With Config.Placement (the channel pool) a vchannel
// grant holds only on the pchannel the pool allocated the vchannel to.
//
// # Bounds
//
// Nothing a peer that has not authenticated does is unbounded
// (bounds.go). A peer is an IP address (an IPv6 address's /64); one that
// presented a verified client certificate, or a token of the policy, is
// not capped.
//
//	connections at once          Config.MaxConnsPerPeer (256): more are
//	                             closed at accept
//	requests in flight           Config.MaxStreamsPerPeer (1024): more are
//	                             ResourceExhausted (429 outside the API)
//	failed TLS handshakes        Config.FailedHandshakesPerPeer a second
//	                             (16, burst 64): beyond, its connections
//	                             are closed at accept until it slows down
//	an idle connection           Config.IdleTimeout (2m)
//	request headers              10s
//	a request's body             Config.RequestReadTimeout (1m)
//	a liveness stream            ends when nothing could be written on it
//	                             for Config.LivenessIdle (30s)
//
// Each refusal is counted in streamwal_node_refused_total{reason}. Every
// refusal's log line (these, refused handshakes, authorization's) is
// rate-limited per peer and reason (refusallog.go): one line per
// Config.RefusalLogInterval (10s), the rest counted in
// streamwal_node_refusal_logs_suppressed_total and said in one line
// ("suppressed similar refusals", with the count) when the interval is
// over. A read that tails a channel may stay open and quiet as long as
// its client wants: it counts against its peer's requests in flight.
//
// # Errors
//
// A request for a channel this node does not own is FailedPrecondition with
// a WrongNode detail naming the owner it knows; an append fenced while in
// flight is Aborted with the same detail; a request for a channel this
// node is opening at its assigned term waits for that open (within the
// request's deadline), so a moved channel's first appends are served the
// moment its WAL is ready; a channel whose open failed, or a node shutting
// down, is Unavailable; a message above the limit is
// ResourceExhausted; bad input (a reserved property key, an invalid channel
// name, a malformed position) is InvalidArgument. Every append error
// carries an Outcome detail: not_stored when nothing was stored (safe to
// send again), otherwise the outcome is unknown.
//
// # Reads across terms
//
// A Read stream follows the tail until its client cancels it (or reaches
// until_caught_up), across the channel's terms on this node: when the
// channel gets a new term here (a migration's term goes to the same owner,
// whose open seals the old segment), the manager closes the old term's
// WAL, and the read goes on with the new term's WAL, waiting for its open,
// after the last message it delivered: nothing lost, nothing twice, and
// the tail taken when the read began stays what until_caught_up and last
// aim at. A channel that moved to another node ends the stream with
// FailedPrecondition and a WrongNode detail naming the owner this node
// knows; a node shutting down, a failed open, or a WAL closed without a
// newer term end it Unavailable. Only until_caught_up (or the client)
// ends a read with OK.
//
// # Channel health
//
// GET /admin/channels reports, per channel assigned to or held by the
// node, whether it is healthy, stalled or failed, judged from the node's
// own traffic: opens failing, appends failing in the node or the backend,
// appends waiting with none finishing for Config.StallAfter (admin.go; the
// README documents the JSON). Status carries the same per channel.
//
// # Exactly-once appends
//
// An append may carry an idempotency key, stored with the message. A retry
// of an append whose outcome was unknown sets retry and the same key: the
// node answers from the keys it acknowledged itself, waits for an attempt
// of that key still in flight, and otherwise reads the channel from the
// retry's resolve_from up to a watermark it writes then (WAL.Tail): a copy
// stored by the earlier attempt, on this owner or a previous one, is found
// there and returned (duplicate), and only if there is none is the message
// stored. A copy a previous owner stored after the new term began is never
// delivered, and so is never found: the retry stores it anew.
//
// # Shutdown
//
// Shutdown stops taking appends (Unavailable), waits for those in flight,
// closes the WALs, revokes its lease (the coordinator moves its channels at
// once), ends the liveness streams and stops serving, all bounded by its
// context.
package node
