package coordinator

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
)

// reason is why a channel gets an owner: the label of the moves metric.
type reason string

const (
	reasonNew         reason = "new"          // a channel without assignment
	reasonOwnerLost   reason = "owner_lost"   // its owner's node key is gone
	reasonOwnerDead   reason = "owner_dead"   // its owner's process was confirmed gone (detector.go)
	reasonOwnerSilent reason = "owner_silent" // its owner was silent for its lease (detector.go)
	reasonDrain       reason = "drain"        // its owner is drained
	reasonRequest     reason = "request"      // an operator's move request
	reasonOpenTimeout reason = "open_timeout" // Assigning for longer than OpenTimeout
	reasonMigrate     reason = "migrate"      // a migration's term: the same owner opens the new segment
)

var reasons = []reason{reasonNew, reasonOwnerLost, reasonOwnerDead, reasonOwnerSilent, reasonDrain, reasonRequest, reasonOpenTimeout, reasonMigrate}

// maxPrevious bounds Assignment.Previous: the most recent owners are kept.
const maxPrevious = 4

type changeKind uint8

const (
	// changeAssign gives a channel an owner: its first one at term 1, or a
	// new one at the current term + 1.
	changeAssign changeKind = iota + 1
	// changeConfirm marks an Assigning assignment Assigned: same owner,
	// same term, Previous cleared.
	changeConfirm
	// changeDropMove deletes a move request nothing can honour.
	changeDropMove
	// changeDropMigrate deletes a migrate request: done (note "") or
	// refused (note says why, recorded under Layout.Refusal).
	changeDropMigrate
)

func (k changeKind) String() string {
	switch k {
	case changeAssign:
		return "assign"
	case changeConfirm:
		return "confirm"
	case changeDropMove:
		return "drop-move"
	case changeDropMigrate:
		return "drop-migrate"
	}
	return fmt.Sprintf("changeKind(%d)", uint8(k))
}

// change is one write the leader decided on: one etcd transaction,
// conditional on everything the decision read.
type change struct {
	kind    changeKind
	channel string
	// reason says why, for changeAssign.
	reason reason
	// rev is the ModRevision of the assignment the decision read; 0 means
	// there was none and the write creates it.
	rev int64
	// prev is the assignment at rev (zero when rev is 0).
	prev cluster.Assignment
	// next is what changeAssign and changeConfirm write.
	next cluster.Assignment
	// openedRev is the ModRevision of the Opened report a changeConfirm
	// relies on.
	openedRev int64
	// moveRev, when not 0, is the ModRevision of the channel's move
	// request, deleted in the same transaction.
	moveRev int64
	// migrateRev, when not 0, is the ModRevision of the channel's migrate
	// request: a changeDropMigrate deletes it; a changeAssign at the
	// migration's term writes it again as migrate (its Term set) in the
	// same transaction.
	migrateRev int64
	migrate    cluster.MigrateRequest
	// note says why a changeDropMove or changeDropMigrate cannot be
	// honoured ("" for a migrate request that is done).
	note string
	// guards are the other keys a changeAssign relied on: the write
	// applies only if each is still as the decision saw it.
	guards []guard
	// detected is, for a move of reason owner_dead or owner_silent, when
	// the owner's death was confirmed or its silence concluded (also
	// written as next.Detected).
	detected time.Time
}

// health is what failure detection (detector.go) knows of the registered
// nodes: an input of decide like the snapshot, each entry about one
// registration of a node (the ModRevision of its node key). An entry whose
// revision is not the node key's in the snapshot is about an earlier
// registration and is ignored.
type health struct {
	// dead are the nodes whose process was confirmed gone: their node key
	// is still there (the lease has not expired), but nothing listens at
	// their address any more.
	dead map[string]death
	// suspect are the nodes the leader holds no liveness stream to and
	// could not prove dead: a partition, a stalled process, or a process
	// about to be confirmed dead. They keep their channels; new ones go
	// elsewhere while a node that is not suspect can take them.
	suspect map[string]int64
	// silent are the nodes that said nothing on their liveness stream for
	// their lease's TTL (and a heartbeat): taken as if their lease had
	// expired, while their key is still there (etcd revokes on its own
	// tick), until they speak again.
	silent map[string]death
}

// death is a node's confirmed death, or its silence (then at is when the
// verdict was given).
type death struct {
	rev int64     // the node key's ModRevision it is about
	at  time.Time // when it was confirmed
}

// deadAt returns the death of the registration of node seen in s, if any.
func (h health) deadAt(s cluster.Snapshot, node string) (death, bool) {
	return h.at(h.dead, s, node)
}

// silentAt returns the silence of the registration of node seen in s, if
// any.
func (h health) silentAt(s cluster.Snapshot, node string) (death, bool) {
	return h.at(h.silent, s, node)
}

func (h health) at(m map[string]death, s cluster.Snapshot, node string) (death, bool) {
	d, ok := m[node]
	n, registered := s.Nodes[node]
	return d, ok && registered && n.Revision == d.rev
}

func (h health) isSuspect(s cluster.Snapshot, node string) bool {
	rev, ok := h.suspect[node]
	n, registered := s.Nodes[node]
	return ok && registered && n.Revision == rev
}

// guardKind names the kind of key a guard checks.
type guardKind uint8

const (
	guardNode  guardKind = iota + 1 // Layout.Node(name)
	guardDrain                      // Layout.Drain(name)
)

// guard is one condition on a key: its ModRevision is rev, or, for rev 0,
// it does not exist.
type guard struct {
	kind guardKind
	name string
	rev  int64
}

// rules are the coordinator's decisions as pure logic: no locks, no
// goroutines, no I/O, no clock. decide looks at one snapshot and says
// what to write; the doer (reconcile.go) writes each change conditionally
// and decides again from a fresh snapshot after any write that did not
// apply, or whose outcome is unknown.
type rules struct {
	openTimeout time.Duration
}

// decide returns the writes that bring the cluster in s closer to every
// channel in channels being owned, at a confirmed term, by a live node;
// h is what failure detection knows of the nodes in s, and migs what the
// chain step (migrate.go) found for the migrate requests of managed
// channels.
// channels need not be sorted or unique. Every change carries the
// revisions in s of the keys its decision rests on (the assignment, the
// Opened report, the move request, the nodes and drains involved), so
// that its write applies only while they are unchanged. Only the load
// counts are not guarded: a write decided on a slightly stale load is
// still safe, merely less balanced.
//
// The rules, per channel in name order (see the package doc):
//
//   - a move request naming a node that is not live (unregistered or
//     drained), naming the current owner, or with no other live node to
//     go to, is dropped;
//   - no assignment: the requested node, or the least-loaded live node;
//     term 1, Assigning;
//   - owner not live (its key gone: owner_lost; its process confirmed
//     gone at the registration in s: owner_dead; silent at that
//     registration: owner_silent; drained: drain): the requested node or
//     the least-loaded live node; term+1, Assigning, the old owner
//     appended to Previous;
//   - a move request: the requested node or the least-loaded other live
//     node; term+1; the request deleted in the same write;
//   - Assigning, and the owner reported an open at this exact node and
//     term without error: Assigned, Previous cleared;
//   - Assigning since more than openTimeout ago (an open error reported
//     or not): the least-loaded other live node, term+1;
//   - a migration's term T (migs): a channel assigned below T is
//     assigned at exactly T, to its owner if it is live (reason migrate),
//     else as the rules above say; any assignment at T also writes the
//     migrate request again with its Term set, guarded by its revision;
//   - a migrate request done or refused (migs) is deleted, a refusal
//     recorded with it; one of a channel not managed is refused;
//   - nothing else changes an assignment: no live node leaves everything
//     as it is, and the coordinator does not rebalance on its own.
//
// Live nodes are the registered ones that are neither drained nor
// confirmed dead nor silent. Load is the number of assignments (of any channel)
// naming a live node, counted as the changes of this pass are decided;
// the least-loaded node is chosen among the live nodes that are not
// suspect, or among the suspect ones when every live node is; ties go to
// the smallest node ID. Assignments of channels not in channels are counted
// but never changed; move requests for them are dropped.
func (r rules) decide(s cluster.Snapshot, h health, channels []string, migs map[string]migration, now time.Time) []change {
	d := newDecision(s, h, r, now)
	d.migs = migs
	managed := sortedUnique(channels)
	for _, ch := range managed {
		d.channel(ch)
	}
	var unmanaged []string
	for ch := range s.Moves {
		if _, ok := slices.BinarySearch(managed, ch); !ok {
			unmanaged = append(unmanaged, ch)
		}
	}
	slices.Sort(unmanaged)
	for _, ch := range unmanaged {
		d.drop(ch, s.Moves[ch].Revision, "channel is not managed")
	}
	unmanaged = unmanaged[:0]
	for ch := range s.Migrations {
		if _, ok := slices.BinarySearch(managed, ch); !ok {
			unmanaged = append(unmanaged, ch)
		}
	}
	slices.Sort(unmanaged)
	for _, ch := range unmanaged {
		d.dropMigrate(ch, s.Migrations[ch], "channel is not managed")
	}
	return d.out
}

// status counts the managed channels that are Assigning, and returns the
// ones Assigning for longer than openTimeout.
func (r rules) status(s cluster.Snapshot, channels []string, now time.Time) (assigning int, overdue []string) {
	for _, ch := range sortedUnique(channels) {
		a, ok := s.Assignments[ch]
		if !ok || a.Value.State == cluster.Assigned {
			continue
		}
		assigning++
		if now.Sub(a.Value.Since) >= r.openTimeout {
			overdue = append(overdue, ch)
		}
	}
	return assigning, overdue
}

// decision is one run of decide.
type decision struct {
	s     cluster.Snapshot
	h     health
	rules rules
	now   time.Time
	// live is the registered nodes that are neither drained nor dead nor
	// silent, sorted by ID.
	live []string
	load map[string]int
	migs map[string]migration
	out  []change
}

func newDecision(s cluster.Snapshot, h health, r rules, now time.Time) *decision {
	d := &decision{s: s, h: h, rules: r, now: now, load: map[string]int{}}
	for id := range s.Nodes {
		_, drained := s.Drains[id]
		_, dead := h.deadAt(s, id)
		_, silent := h.silentAt(s, id)
		if !drained && !dead && !silent {
			d.live = append(d.live, id)
			d.load[id] = 0
		}
	}
	slices.Sort(d.live)
	for _, a := range s.Assignments {
		if _, ok := d.load[a.Value.Node]; ok {
			d.load[a.Value.Node]++
		}
	}
	return d
}

func (d *decision) isLive(node string) bool {
	_, ok := d.load[node]
	return ok
}

// leastLoaded returns the live node other than exclude with the fewest
// channels (the smallest ID among equals), or "" if there is none; a
// suspect node only when every other live node is suspect too.
func (d *decision) leastLoaded(exclude string) string {
	best, bestSuspect := "", false
	for _, n := range d.live {
		if n == exclude {
			continue
		}
		suspect := d.h.isSuspect(d.s, n)
		switch {
		case best == "",
			bestSuspect && !suspect,
			bestSuspect == suspect && d.load[n] < d.load[best]:
			best, bestSuspect = n, suspect
		}
	}
	return best
}

func (d *decision) channel(ch string) {
	cur, assigned := d.s.Assignments[ch]
	owner := cur.Value.Node
	mig, migrating := d.migs[ch]
	switch {
	case !migrating:
	case mig.refusal != "":
		d.dropMigrate(ch, d.s.Migrations[ch], mig.refusal)
	case mig.done:
		d.dropMigrate(ch, d.s.Migrations[ch], "")
	}
	// to is the requested node ("" for the least loaded) and moveRev the
	// request's revision, when there is a request to honour.
	var to string
	var moveRev int64
	if req, ok := d.s.Moves[ch]; ok {
		to = req.Value.To
		switch {
		case to != "" && !d.isLive(to):
			d.drop(ch, req.Revision, fmt.Sprintf("node %q is not live", to))
		case assigned && to != "" && to == owner:
			d.drop(ch, req.Revision, fmt.Sprintf("already on node %q", to))
		case assigned && to == "" && d.isLive(owner) && d.leastLoaded(owner) == "":
			d.drop(ch, req.Revision, "no other live node")
		default:
			moveRev = req.Revision
		}
		if moveRev == 0 {
			to = ""
		}
	}
	switch {
	case !assigned:
		if to == "" {
			to = d.leastLoaded("")
		}
		if to != "" {
			d.assign(ch, reasonNew, nil, to, moveRev)
		}
	case !d.isLive(owner):
		why := reasonOwnerLost
		if _, registered := d.s.Nodes[owner]; registered {
			why = reasonDrain
		}
		if _, silent := d.h.silentAt(d.s, owner); silent {
			why = reasonOwnerSilent
		}
		if _, dead := d.h.deadAt(d.s, owner); dead {
			why = reasonOwnerDead
		}
		if to == "" {
			to = d.leastLoaded(owner)
		}
		if to != "" {
			d.assign(ch, why, &cur, to, moveRev)
		}
	case moveRev != 0:
		if to == "" {
			to = d.leastLoaded(owner)
		}
		d.assign(ch, reasonRequest, &cur, to, moveRev)
	case mig.term > cur.Value.Term:
		// The migration's intent is recorded at mig.term: the owner's open
		// at that term seals the old segment and opens the new one.
		d.assign(ch, reasonMigrate, &cur, owner, 0)
	case cur.Value.State == cluster.Assigned:
	case d.opened(ch, cur.Value):
		next := cur.Value
		next.Channel = ch
		next.State = cluster.Assigned
		next.Previous = nil
		d.out = append(d.out, change{
			kind: changeConfirm, channel: ch, rev: cur.Revision, prev: cur.Value, next: next,
			openedRev: d.s.Opened[ch].Revision,
		})
	case d.now.Sub(cur.Value.Since) >= d.rules.openTimeout:
		// With no other live node the channel stays overdue: the
		// coordinator reports it (status) and moves it once it can.
		if to = d.leastLoaded(owner); to != "" {
			d.assign(ch, reasonOpenTimeout, &cur, to, 0)
		}
	}
}

// opened reports whether the owner of a reported opening it at its
// term without error.
func (d *decision) opened(ch string, a cluster.Assignment) bool {
	o, ok := d.s.Opened[ch]
	return ok && o.Value.Node == a.Node && o.Value.Term == a.Term && o.Value.Error == ""
}

// assign gives ch to node: term 1 if cur is nil, else cur's term + 1 with
// cur's owner appended to Previous. The write is guarded by what made the
// decision: the target still registered under the same key revision and
// not drained; a lost owner's key still absent, a dead or silent owner's
// key still the registration its death or silence is about, a drained
// owner's drain still there.
func (d *decision) assign(ch string, why reason, cur *cluster.Versioned[cluster.Assignment], node string, moveRev int64) {
	c := change{kind: changeAssign, channel: ch, reason: why, moveRev: moveRev}
	c.next = cluster.Assignment{Channel: ch, Node: node, Term: 1, State: cluster.Assigning, Since: d.now}
	c.guards = []guard{{kind: guardNode, name: node, rev: d.s.Nodes[node].Revision}, {kind: guardDrain, name: node}}
	if cur != nil {
		if cur.Value.Term == math.MaxInt64 {
			return // a term that cannot grow: leave the channel where it is
		}
		switch why {
		case reasonOwnerLost:
			c.guards = append(c.guards, guard{kind: guardNode, name: cur.Value.Node})
		case reasonOwnerDead:
			dead, _ := d.h.deadAt(d.s, cur.Value.Node)
			c.guards = append(c.guards, guard{kind: guardNode, name: cur.Value.Node, rev: dead.rev})
			c.detected, c.next.Detected = dead.at, dead.at
		case reasonOwnerSilent:
			silent, _ := d.h.silentAt(d.s, cur.Value.Node)
			c.guards = append(c.guards, guard{kind: guardNode, name: cur.Value.Node, rev: silent.rev})
			c.detected, c.next.Detected = silent.at, silent.at
		case reasonDrain:
			c.guards = append(c.guards, guard{kind: guardDrain, name: cur.Value.Node, rev: d.s.Drains[cur.Value.Node].Revision})
		}
		c.rev, c.prev = cur.Revision, cur.Value
		c.next.Term = cur.Value.Term + 1
		if mig, ok := d.migs[ch]; ok && mig.term > c.next.Term {
			// A migration's term: never assign the channel between its
			// term and the intent's, which the open at the intent's term
			// finishes.
			c.next.Term = mig.term
		}
		if mig, ok := d.migs[ch]; ok && mig.term == c.next.Term && mig.refusal == "" && !mig.done {
			if m, ok := d.s.Migrations[ch]; ok {
				c.migrateRev, c.migrate = m.Revision, m.Value
				c.migrate.Term = mig.term
			}
		}
		prev := append(slices.Clone(cur.Value.Previous), cluster.Owner{Node: cur.Value.Node, Term: cur.Value.Term})
		c.next.Previous = prev[max(0, len(prev)-maxPrevious):]
		if d.isLive(cur.Value.Node) {
			d.load[cur.Value.Node]--
		}
	}
	d.load[node]++
	d.out = append(d.out, c)
}

func (d *decision) drop(ch string, moveRev int64, note string) {
	d.out = append(d.out, change{kind: changeDropMove, channel: ch, moveRev: moveRev, note: note})
}

// dropMigrate deletes the migrate request m of ch: done when note is "",
// else refused, note recorded.
func (d *decision) dropMigrate(ch string, m cluster.Versioned[cluster.MigrateRequest], note string) {
	d.out = append(d.out, change{kind: changeDropMigrate, channel: ch, migrateRev: m.Revision, migrate: m.Value, note: note})
}

// migration is what the chain step (migrate.go) found for the migrate
// request of a managed channel: an input of decide, like the snapshot.
// At most one of its fields is set; none means wait.
type migration struct {
	// term is the term of the channel's pending migration to the
	// request's backend: decide assigns the channel at exactly this term
	// while it is assigned below it.
	term int64
	// done: the chain ends on the request's backend, by this request.
	done bool
	// refusal says why the request is refused.
	refusal string
}

// stepKind is what the chain step does for a migrate request.
type stepKind uint8

const (
	stepWait   stepKind = iota // nothing this pass
	stepDone                   // the chain ends on To, by this request
	stepRefuse                 // note says why
	stepBegin                  // record the intent at term on segment, then drive it
	stepDrive                  // the intent is recorded at term: decide assigns the channel there
	stepCancel                 // an intent at term on segment no open will seal: cancel it (and refuse, with a note)
)

func (k stepKind) String() string {
	return [...]string{"wait", "done", "refuse", "begin", "drive", "cancel"}[k]
}

// migrateStep is planMigration's answer.
type migrateStep struct {
	kind    stepKind
	segment uint64
	term    int64
	note    string
}

// planMigration decides, as pure logic, what to do for the migrate
// request req of a channel whose assignment is a (assigned false: none)
// and whose chain is c (found false: none), the chain read after the
// snapshot that holds req and a. The rules (see the package doc):
//
//   - no chain: wait while the channel was never opened at its term (its
//     first open creates the chain); refuse once it was (Assigned): its
//     owner opened it without a chain;
//   - a migration pending at T, the channel Assigned at T or above: its
//     owner opened it at or above T without sealing. If this request
//     drove it (req.Term is T: the intent was there before the assignment
//     at T), the owner runs without chains: cancel it and refuse. Else the
//     intent was written after that open (a deposed leader's, or one
//     whose term went stale): cancel it, and decide again next pass;
//   - a migration pending to another backend: refuse (cancel it first);
//   - pending to To at T: assigned below T, drive it (assign at T);
//     else wait for the owner's open at T, which seals;
//   - nothing pending, the last segment on To: done when req.Term is set
//     (this request's migration sealed) or the segment was created after
//     the request was made (req.At: sealed while it waited), else refuse
//     (on To already);
//   - nothing pending, unassigned: wait;
//   - else begin: the intent at the assignment's term + 1 on the last
//     segment.
func planMigration(req cluster.MigrateRequest, a cluster.Assignment, assigned bool, c chain.Chain, found bool) migrateStep {
	if !found {
		if assigned && a.State == cluster.Assigned {
			return migrateStep{kind: stepRefuse, note: fmt.Sprintf("the channel has no chain: its owner %s opened it at term %d without one (its nodes run without chains)", a.Node, a.Term)}
		}
		return migrateStep{kind: stepWait}
	}
	last := c.Last()
	if p := c.Pending; p != nil {
		switch {
		case assigned && a.Term >= p.Term && a.State == cluster.Assigned && req.Term == p.Term:
			return migrateStep{kind: stepCancel, segment: last.Index, term: p.Term,
				note: fmt.Sprintf("its owner %s opened the channel at term %d without sealing the migration's segment: the node runs without chains", a.Node, a.Term)}
		case assigned && a.Term >= p.Term && a.State == cluster.Assigned:
			return migrateStep{kind: stepCancel, segment: last.Index, term: p.Term}
		case p.Target.Name != req.To:
			return migrateStep{kind: stepRefuse, note: fmt.Sprintf("another migration (to %s at term %d, requested by %q) is pending: cancel it first", p.Target.Name, p.Term, p.By)}
		case assigned && a.Term < p.Term:
			return migrateStep{kind: stepDrive, segment: last.Index, term: p.Term}
		}
		return migrateStep{kind: stepWait}
	}
	switch {
	case last.Backend.Name == req.To && (req.Term != 0 || last.Created.After(req.At)):
		// Sealed by this request's migration, or while it waited (its
		// intent was there before it, and the leader did not assign it):
		// done.
		return migrateStep{kind: stepDone}
	case last.Backend.Name == req.To:
		return migrateStep{kind: stepRefuse, note: fmt.Sprintf("the channel is on backend %s already (segment %d, since term %d)", req.To, last.Index, last.FirstTerm)}
	case !assigned:
		return migrateStep{kind: stepWait}
	case a.Term == math.MaxInt64:
		return migrateStep{kind: stepRefuse, note: fmt.Sprintf("the channel's term %d cannot grow", a.Term)}
	}
	return migrateStep{kind: stepBegin, segment: last.Index, term: a.Term + 1}
}

func sortedUnique(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}
