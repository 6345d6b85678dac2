// Package cluster is the shared vocabulary of a streamwal cluster: what the
// coordinator, the nodes, the clients and walctl keep in etcd, how it is
// encoded, and a read-only View that follows it. It decides nothing; the
// coordinator package decides, the node package obeys.
//
// # Roles
//
// Nodes register under an etcd lease and host the channels (pchannels)
// assigned to them. One coordinator, elected among any number of candidate
// processes, assigns channels to live nodes and bumps a channel's term on
// every move. A node opens a channel at its assigned term; the backend's
// fencing (and the log's term-begin) makes the move safe even when the old
// owner never hears of it: the lease only decides when to move, the term is
// what stops the old owner.
//
// # Keys
//
// Every key lives under a root (Layout.Root, default "/streamwal/cluster/"),
// with JSON values that carry a version field "v" (1).
//
//	<root>nodes/<node>          NodeInfo    under the node's session lease
//	<root>assign/<channel>      Assignment  written by the leader only
//	<root>opened/<channel>      Opened      under the owner's session lease
//	<root>requests/move/<channel>  MoveRequest  written by operators
//	<root>requests/migrate/<channel>  MigrateRequest written by operators (Term by the leader)
//	<root>requests/drain/<node>    DrainRequest written by operators
//	<root>requests/refused/<channel>  MoveRefusal  written by the leader (of a move or a migration)
//	<root>election/<lease>      the coordinator election (etcd concurrency)
//	<root>candidates/<lease>    CandidateInfo  beside each election key, same lease
//
// An Assignment names the channel's owner and term and whether the owner has
// confirmed the open (State). Every write of an assignment by the
// coordinator is a transaction conditional on the coordinator still leading
// (the create revision of its election key) and on the assignment's
// revision it read: a deposed leader's write fails, and two leaders can
// never both move a channel. A term only grows.
//
// Whoever can write these keys steers the cluster: with etcd's
// authentication on, the roles of security/authz (EtcdRoles, walctl
// etcd-roles) let nodes write the root, operators write move and drain
// requests only, and viewers read.
//
// A MigrateRequest asks for a channel's writes to move to another backend
// (a new segment of the channel's chain, package chain, kept in the meta
// store beside the cluster, under the root without its slash plus
// "-meta/"). The leader records the intent in the chain at the channel's
// next term and assigns the channel at exactly that term; the owner's open
// at that term fences the old segment, seals it and opens the new one.
// The coordinator package documents the rules.
//
// The node that opened a channel at its assigned term writes Opened under
// its own lease; the coordinator then marks the assignment Assigned. An
// Opened of another term or node is stale and ignored.
//
// # Failure detection
//
// A node serves a liveness stream at LivenessPath on its address, and the
// leader holds one open to each node: when a node's process dies, its
// kernel ends the stream and then refuses connections to its address, and
// the leader moves its channels then (Assignment.Detected), without waiting
// for its lease. Only a refused connection counts as death: a stalled or
// partitioned node keeps its channels until its lease expires - which the
// leader also learns from the node's heartbeats on that stream (their
// silence for NodeInfo.LeaseTTL), without waiting for etcd to delete the
// key. The coordinator package documents the rules.
package cluster
