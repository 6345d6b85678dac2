// Package coordinator assigns a cluster's channels (pchannels) to its live
// nodes and moves them, bumping the channel's term on every move. It
// writes only the assignments (and deletes the move requests it
// consumes) in the keys the cluster package defines, and a migration's
// intent in a channel's chain; nodes obey them.
//
// # Leadership
//
// Any number of Coordinators run against one cluster root; they campaign
// in an etcd election on Layout.Election(), each under a
// concurrency.Session lease of Config.SessionTTL, and one leads. The
// election's keys are those of concurrency.Election (its Leader and
// Observe follow it); the campaign itself is done here so that a
// cancelled campaign never waits for an unreachable etcd (election.go).
// Only the leader writes. It steps down when its session ends (etcd
// unreachable for about the TTL, lease expired or revoked) or when a
// write finds it deposed, and campaigns again with a new session. Run
// returns when its context ends, after resigning and revoking its lease
// (bounded by the TTL), so that another candidate takes over at once. A
// crashed leader is replaced as soon as the candidate behind it confirms
// its process gone (see Failure detection), else when its lease expires.
// Beside its election key each candidate puts a cluster.CandidateInfo
// naming the node in its process (Config.Node) and the migrations it
// carries out (with Config.Chains, the entries of Config.Backends: walctl
// migrate refuses another target up front), under the same lease.
//
// # Writes
//
// Every write of the leader is one etcd transaction conditional on
//
//   - CreateRevision(its election key) == the revision it won at: a
//     deposed leader's writes fail, even while it still believes it
//     leads (a lease ends by time, the leader's loop by noticing);
//   - the ModRevision of the assignment it read (Version 0 when it
//     creates one), of the Opened report a confirmation relies on, and
//     of the move request it deletes in the same transaction.
//
// So two leaders can never both move a channel from one state, and each
// move bumps the term exactly once: terms of a channel never decrease or
// repeat, and every change of owner is term+1. A write whose condition
// failed is not retried: the leader reads the cluster again and decides
// anew. A write whose answer was lost may have applied; it is not
// reapplied either: the next pass decides from a fresh read.
//
// # Decisions
//
// Each pass reads every key of the cluster at one revision
// (cluster.Load), lists the channels (Config.Channels) and decides with a
// pure function (decide.go) what to write:
//
//   - live nodes are the registered nodes minus the drained ones and
//     those confirmed dead or found silent (see Failure detection);
//   - a channel without assignment goes to the least-loaded live node
//     (load: channels assigned to it; suspect nodes only if every live
//     node is suspect; ties: smallest ID), term 1,
//     Assigning;
//   - a channel whose owner is not live (its node key is gone, i.e. its
//     lease expired: owner_lost; its process is confirmed gone, see
//     Failure detection: owner_dead; it is silent for its lease, ditto:
//     owner_silent; or it is drained) goes to the
//     least-loaded live node, term+1, Assigning, the old owner appended
//     to Previous (the last 4 kept);
//   - a move request moves the channel to the requested node (or the
//     least-loaded other live node if To is ""), term+1, and is deleted
//     in the same transaction; a request naming a node that is not live,
//     or the current owner, or with nowhere to go, is deleted and logged,
//     and the reason recorded under Layout.Refusal (cluster.MoveRefusal)
//     in the same transaction, for walctl to report;
//   - an Opened report of the owner at the assignment's exact node and
//     term, without error, makes an Assigning assignment Assigned and
//     clears Previous;
//   - an assignment Assigning for longer than Config.OpenTimeout (open
//     error reported or not) moves to the least-loaded other live node,
//     term+1. With no other node it stays, is logged once and counted in
//     the overdue metric: a channel never stays Assigning silently;
//   - with no live node nothing changes. The coordinator does not
//     rebalance on its own: a new or undrained node gets new channels and
//     those of lost owners; operators move others (RequestMove).
//   - a migration (below) whose intent is recorded at term T assigns its
//     channel at exactly T while it is assigned below T: to its owner if
//     live (reason migrate), else as the rules above say; no rule
//     assigns it between its term and T.
//
// A node that restarts with the same ID keeps its channels, at the same
// term, unless its node key was gone, or its previous process confirmed
// dead, when the leader looked: then they moved (term+1) and it does not
// get them back by returning.
//
// Assignments of channels the source no longer lists are counted as load
// but never changed or deleted. An assignment key must never be deleted
// by hand: the term would restart at 1, below what the backend has seen.
//
// A pass runs on every change of the cluster (a cluster.View wakes the
// leader), every Config.ReconcileInterval, and soon after a pass that
// did not finish cleanly (capped backoff).
//
// # Migrations
//
// A migrate request (cluster.MigrateRequest under Layout.Migrate, written
// by RequestMigrate: one per channel, to one backend entry To) moves a
// channel's writes to a new segment of its chain on another backend
// (package chain, "Migration"). The leader drives it; the node it
// assigns does the rest: its open at the migration's term through
// chainwal fences the old segment, records the seal and opens the new
// segment. Each pass, before deciding, the leader reads the chain (in
// Config.Chains) of every managed channel with a request - after the
// cluster's snapshot, which the rules rely on - and plans, as pure logic
// (planMigration):
//
//   - the cluster runs without chains (Config.Chains nil): refused;
//   - no chain yet: wait while the channel was never opened at its term
//     (its first open creates the chain); refused once its owner opened
//     it without one (the nodes run without chains);
//   - nothing pending, the chain's last segment on another backend:
//     record the intent (chain.Store.BeginMigration) on the last segment,
//     to Config.Describe(To) on the backend channel
//     chainwal.SegmentChannel(channel, last+1), at the assignment's term +
//     1, by the request's By; then assign the channel at exactly that
//     term (above). The assignment is conditional on the assignment's
//     revision, like every move, and on the request's, which it writes
//     again with Term set in the same transaction. An unknown entry, a
//     stale term, a chain at its segment limit: refused, with the chain's
//     message;
//   - pending to To at T, assigned below T: assign at T (a leader that
//     crashed between the intent and the assignment); assigned at T or
//     above and not yet opened there: wait, the open seals;
//   - pending at T (to any backend) while the owner has opened the
//     channel at T or above (Assigned): that open did not seal, so the
//     intent was written after it - by a leader that read the assignment
//     before it was deposed. Left there, a later open would fence the old
//     segment at a term an owner already wrote at. The leader cancels it
//     (CancelMigration) and plans the request again next pass - unless
//     the request drove that very intent (its Term is T: the intent was
//     there before the assignment at T), which means the owner opens
//     channels without chains: cancelled and refused;
//   - pending to another backend: refused ("cancel it first");
//   - nothing pending, the last segment on To: done if the request's Term
//     is set (the migration it drove sealed), or the segment was created
//     after the request's At (an intent that was there before the request
//     sealed while it waited): the request is deleted; else the channel
//     was on To before the request: refused.
//
// A refusal deletes the request and records why under Layout.Refusal
// (cluster.MoveRefusal, Kind cluster.RefusedMigrate), in one transaction,
// as for moves; requests of channels not managed are refused too.
//
// Only the leader changes chains: it checks that its election key is
// still its own before each chain write and after an intent (a chain
// write cannot carry the election condition: the chain store is a
// meta.Store). A deposed leader's intent that lands anyway is either
// finished like any other (assigned below its term) or cancelled by the
// rule above. A chain that changed between its read and the intent's
// write, or that cannot be read, ends the pass (the next one, soon,
// plans from fresh reads): the leader never assigns a channel with a
// migrate request without knowing its chain.
//
// The leader also checks, after an intent, that its request still stands
// (the same revision): CancelMigrate deletes the request and then cancels
// what the chain has pending, so an intent recorded for a request being
// withdrawn is cancelled by one or the other, whichever reads second.
// CancelMigrate cancels only before the seal; once sealed, migrating back
// undoes a migration.
//
// # Failure detection
//
// A lease expires a TTL after its holder's last keep-alive, so a node
// that crashes keeps its channels for about the TTL, although its process
// closed every connection the moment it died. The leader learns of that
// moment and moves the channels then (detector.go, liveness.go). For what
// leaves no such trace (a stalled process, a partition, a host that lost
// power) the lease decides - but etcd deletes an expired lease's keys only
// on its next 500 ms expiry tick, so the leader also times the node's
// silence against the lease itself (Silence, below), to move at the
// lease's expiry rather than up to half a second after it.
//
// The leader holds a liveness stream to every registered node: an HTTP
// GET of cluster.LivenessPath on the node's address (NodeInfo.Addr), which
// the node answers and holds open while it runs. When the stream ends, or
// cannot be established, the leader connects again at once. That
// connection is the probe, and exactly one outcome of it moves channels
// before the lease expires:
//
//   - refused (ECONNREFUSED): the node's host answered that nothing
//     listens on the port the node registered. A node listens before it
//     registers and stops only when its process ends (or at the very end
//     of Shutdown, after revoking its lease), so its process is gone. The
//     registration (the node key at its ModRevision) is dead: its
//     channels move at once (reason owner_dead, Assignment.Detected is
//     the confirmation's time), it gets no channel, and the move's write
//     is conditional on the node key still being that registration;
//   - accepted: the node is alive, or stalled (a stopped process's kernel
//     still accepts connections and acknowledges data; only the answer
//     waits). The probe becomes the next stream and waits for its answer
//     without a deadline: a stall proves nothing, however long;
//   - anything else (a timeout, a reset, an unreachable host, an answer
//     other than 200) proves nothing either: the node is suspect (it
//     keeps its channels; new ones go to nodes that are not suspect while
//     there are any) and the leader tries again with backoff (10 ms to
//     1 s). A connection timeout is bounded by Config.ProbeTimeout.
//
// So a crashed node loses its channels within about a round trip of its
// death. A node whose registration was confirmed dead is live again when
// it registers anew (a restarted process). Moving on a false verdict
// would still be safe - a move is term+1 and the backend fences the old
// owner - only needless; the one case known to give one is a firewall
// that answers a partitioned node's port with resets (REJECT
// --reject-with tcp-reset), and an advertised address that is not the
// node's own listener (a proxy): set Config.LeaseOnly there.
//
// Silence. A node that publishes its lease's granted TTL
// (NodeInfo.LeaseTTL) is asked for heartbeats on its stream
// (cluster.LivenessHeartbeat), every TTL/40 (20 ms to 1 s: 25 ms at a 1 s
// TTL), and the leader times what it hears (silence.go). A node stalled
// at S wrote its last heartbeat at S - interval or later and renewed its
// lease at S or earlier, so its lease has expired by S + TTL (plus the
// last keep-alive's way to etcd; an etcd leader change extends every
// lease by an election timeout), which is at most its last heartbeat +
// TTL + interval: the limit. A node that said nothing for the limit on a
// connection open all along is silent: taken as if its lease had expired
// (it is not live; its channels move, reason owner_silent,
// Assignment.Detected the verdict's time, the write conditional on the
// node key still being that registration), until any byte from it
// arrives; then it is live again. A node stalled for less
// than its TTL is never silent for the limit: such a stall keeps its
// channels, as before (etcd's own expiry may still take them: a lease
// renewed every TTL/3 expires after a stall of two thirds of the TTL or
// more). Three guards keep a live node from being judged silent:
//
//   - the leader's own stall: a timer that fires proves nothing (this
//     process may not have run, the heartbeats waiting unread in its
//     socket, and Go may run the expired timer before it polls the
//     network). The verdict needs the connection's socket itself found
//     empty (a non-blocking MSG_PEEK) at a moment the silence had reached
//     the limit; bytes read late count as heard when read, which only
//     delays a verdict;
//   - a path that was not open: silence is measured on the connection in
//     use, from its start; a node the leader cannot connect to (a
//     timeout, a reset) is suspect, never silent, and its lease decides;
//   - a node that runs but is not heard (the path between it and the
//     leader broken while it still reaches etcd; its heartbeats delayed
//     past a TTL while its keep-alives pass): before the verdict the
//     leader asks etcd how long the lease has left. A second or more: it
//     was renewed, the node runs; it keeps its channels (counted
//     lease_alive, logged) and is judged again when that time has passed.
//     etcd answers in whole seconds, truncated, so below a 2 s TTL it
//     cannot tell a live lease from an expired one and is not asked.
//
// Worst cases. A stalled node is found silent between S + TTL and S + TTL
// + interval, plus the leader's scheduling; etcd revokes its lease between
// its expiry (S + TTL - the keep-alive period, at the earliest) and half
// a second after it, and whichever comes first moves the channels. A
// wrong verdict - the node was alive - costs a needless move (a term
// bump) of each of its channels; it takes, at a TTL of 2 s or more, a
// lease with under a second left (its keep-alives failing too), and below
// that, a node not heard for the limit on an open connection. Each is
// counted when its registration outlives the verdict by a TTL and a
// second (_premature_silences_total, logged with the reason). A node
// starved of CPU just before it stopped, or heartbeats much slower than
// keep-alives on their way, can make a verdict that much earlier than the
// lease's expiry. A node that does not publish its TTL, or answers
// without the heartbeat header (a node that predates them), is not timed:
// its lease decides, as before. A candidate's watch of the leader's node
// is not timed either: a stalled leader's election key waits for its
// session's lease.
//
// A candidate waiting for another's election key watches the node named
// by that candidate's CandidateInfo the same way, and deletes the key
// (conditional on the key and the node's registration being the ones it
// watched) once that node's process is confirmed gone; the next candidate
// then leads, and its detector finds the node dead on its first probe.
//
// What the detector learns is an input of decide (health), like the
// snapshot: decide stays pure, and is tested step by step.
//
// # Observability
//
// Metrics (on Config.Registerer while Run runs): streamwal_coordinator_leader,
// _moves_total{reason=new|owner_lost|owner_dead|owner_silent|drain|request|open_timeout|migrate},
// _migrations_total{outcome=started|finished|refused|cancelled},
// _assigning_channels, _overdue_channels, _failed_writes_total{cause=
// conflict|deposed|unknown}; for failure detection _liveness_streams,
// _suspect_nodes, _dead_nodes_total, _dead_candidates_total,
// _silent_nodes_total{outcome=silent|lease_alive},
// _premature_silences_total, and the phases of a move, as histograms:
// _detect_seconds (a node's stream ended to its death confirmed) and
// _decide_seconds{reason} (the evidence - for owner_dead the confirmed
// death, for owner_silent the verdict, else the start of the pass - to
// the move's write applied). The node's metrics time the rest (package
// node). Every assignment written is logged with channel, node, term,
// reason and the previous owner.
//
// # Operators
//
// RequestMove, RequestDrain, Undrain, RequestMigrate and CancelMigrate
// write the request keys (CancelMigrate the chain too); the leader acts on
// them at its next pass.
package coordinator
