// Package coordinator assigns a cluster's channels (pchannels) to its live
// nodes and moves them, bumping the channel's term on every move. It
// writes only the assignments (and deletes the move requests it
// consumes) in the keys the cluster package defines; nodes obey them.
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
// (bounded by the TTL), so that another candidate takes over at once; a
// crashed leader is replaced when its lease expires.
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
//   - live nodes are the registered nodes minus the drained ones;
//   - a channel without assignment goes to the least-loaded live node
//     (load: channels assigned to it; ties: smallest ID), term 1,
//     Assigning;
//   - a channel whose owner is not live (its node key is gone, i.e. its
//     lease expired, or it is drained) goes to the least-loaded live
//     node, term+1, Assigning, the old owner appended to Previous (the
//     last 4 kept);
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
//
// A node that restarts with the same ID keeps its channels, at the same
// term, unless its node key was gone when the leader looked: then they
// moved (term+1) and it does not get them back by returning.
//
// Assignments of channels the source no longer lists are counted as load
// but never changed or deleted. An assignment key must never be deleted
// by hand: the term would restart at 1, below what the backend has seen.
//
// A pass runs on every change of the cluster (a cluster.View wakes the
// leader), every Config.ReconcileInterval, and soon after a pass that
// did not finish cleanly (capped backoff).
//
// # Observability
//
// Metrics (on Config.Registerer while Run runs): streamwal_coordinator_leader,
// _moves_total{reason=new|owner_lost|drain|request|open_timeout},
// _assigning_channels, _overdue_channels, _failed_writes_total{cause=
// conflict|deposed|unknown}. Every assignment written is logged with
// channel, node, term, reason and the previous owner.
//
// # Operators
//
// RequestMove, RequestDrain and Undrain write the request keys; the
// leader acts on them at its next pass.
package coordinator
