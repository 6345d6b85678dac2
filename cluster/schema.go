package cluster

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// DefaultRoot is where a cluster keeps its keys in etcd.
const DefaultRoot = "/streamwal/cluster/"

// formatVersion is the version of every value this package writes.
const formatVersion = 1

// ErrCorrupt means a stored value does not decode.
var ErrCorrupt = errors.New("cluster: corrupt value")

// Layout builds a cluster's keys under one root.
type Layout struct {
	// Root prefixes every key; it must end with "/".
	Root string
}

// NewLayout returns the layout under root ("" for DefaultRoot).
func NewLayout(root string) (Layout, error) {
	if root == "" {
		root = DefaultRoot
	}
	if !strings.HasSuffix(root, "/") {
		return Layout{}, errors.Newf("cluster: root %q must end with /", root)
	}
	return Layout{Root: root}, nil
}

func (l Layout) Nodes() string                    { return l.Root + "nodes/" }
func (l Layout) Node(id string) string            { return l.Nodes() + id }
func (l Layout) Assignments() string              { return l.Root + "assign/" }
func (l Layout) Assignment(channel string) string { return l.Assignments() + channel }
func (l Layout) OpenedPrefix() string             { return l.Root + "opened/" }
func (l Layout) Opened(channel string) string     { return l.OpenedPrefix() + channel }
func (l Layout) Moves() string                    { return l.Root + "requests/move/" }
func (l Layout) Move(channel string) string       { return l.Moves() + channel }
func (l Layout) Drains() string                   { return l.Root + "requests/drain/" }
func (l Layout) Drain(node string) string         { return l.Drains() + node }
func (l Layout) Refusals() string                 { return l.Root + "requests/refused/" }
func (l Layout) Refusal(channel string) string    { return l.Refusals() + channel }
func (l Layout) Migrations() string               { return l.Root + "requests/migrate/" }
func (l Layout) Migrate(channel string) string    { return l.Migrations() + channel }

// Election is the coordinator election's prefix as concurrency.NewElection
// takes it, without the trailing slash: each candidate's key is
// Election() + "/" + its lease ID in hex. (Before, Election ended with a
// slash and the keys had two; a candidate of this version also waits for
// such keys, which are under its prefix, but an older candidate does not
// see the new ones: upgrade every candidate of a cluster together.)
func (l Layout) Election() string { return l.Root + "election" }

// Candidates is where candidates say which node runs in their process.
func (l Layout) Candidates() string { return l.Root + "candidates/" }

// Candidate is the CandidateInfo of the candidate whose election key is
// under lease (its session's lease ID, in hex like the election key).
func (l Layout) Candidate(lease int64) string { return fmt.Sprintf("%s%x", l.Candidates(), lease) }

// LivenessPath is the path of a node's liveness stream, on its API
// address: a GET with the node's ID as query parameter "node" is answered
// 200, the ID and a newline, and then held open for as long as the node
// runs. The coordinator's failure detection holds one open to every
// node; its end is the first sign that the process may be gone.
//
// With the query parameter LivenessHeartbeat (a Go duration, "25ms"), the
// node also writes an empty line (a heartbeat) at that interval, clamped
// to [MinHeartbeat, MaxHeartbeat], and says so in its answer's header
// LivenessHeartbeatHeader (the interval it uses). A node that predates
// heartbeats ignores the parameter and answers without the header; a
// coordinator that predates them does not ask, and reads the stream as
// before: either may be upgraded first.
const LivenessPath = "/streamwal/liveness"

// The liveness stream's heartbeats (see LivenessPath).
const (
	LivenessHeartbeat       = "heartbeat"
	LivenessHeartbeatHeader = "Streamwal-Heartbeat"
	MinHeartbeat            = 10 * time.Millisecond
	MaxHeartbeat            = 10 * time.Second
)

// NodeInfo is a registered node.
type NodeInfo struct {
	ID string `json:"id"`
	// Addr is where the node serves its API (host:port), and its
	// liveness stream (LivenessPath); "" for none (the coordinator then
	// learns of the node's death from its lease only). It must reach the
	// node's own listener, not a proxy: a connection to it refused means
	// the node's process is gone.
	Addr string `json:"addr"`
	// Started is when this incarnation registered.
	Started time.Time `json:"started"`
	// LeaseTTL is the TTL etcd granted the lease the node key is under,
	// in whole seconds as etcd counts them (0: not published, a node
	// that predates it). A node that publishes it heartbeats on its
	// liveness stream when asked, and the coordinator then takes a node
	// silent there for LeaseTTL (and a heartbeat) as one whose lease
	// expired (package coordinator, "Failure detection").
	LeaseTTL int64 `json:"lease_ttl,omitempty"`
}

// State is where an assignment stands.
type State string

const (
	// Assigning: the owner was chosen and must open the channel at Term.
	Assigning State = "assigning"
	// Assigned: the owner reported the channel open at Term.
	Assigned State = "assigned"
)

// Owner is one holder of a channel in an assignment's history.
type Owner struct {
	Node string `json:"node"`
	Term int64  `json:"term"`
}

// Assignment says which node owns a channel, at which term.
type Assignment struct {
	Channel string `json:"channel"`
	Node    string `json:"node"`
	Term    int64  `json:"term"`
	State   State  `json:"state"`
	// Previous holds the owners before this one that were not confirmed
	// gone when the channel moved (most recent last, bounded).
	Previous []Owner `json:"previous,omitempty"`
	// Since is when the channel got this owner and term.
	Since time.Time `json:"since"`
	// Detected, on a move by the coordinator's failure detection - the
	// previous owner's process confirmed gone before its lease expired,
	// or the owner silent on its liveness stream for its lease's TTL -
	// is when the leader concluded it; zero otherwise.
	Detected time.Time `json:"detected,omitzero"`
}

// Opened is a node's report that it opened a channel at a term, or failed
// to (Error).
type Opened struct {
	Channel string `json:"channel"`
	Node    string `json:"node"`
	Term    int64  `json:"term"`
	Error   string `json:"error,omitempty"`
	// Seen, Fenced and Ready time a successful open on the node's clock:
	// when the node saw the assignment, when the backend's open (which
	// fences every lower term) returned, and when the WAL was ready (the
	// end of the log found, the term-begin written). Zero when unknown.
	Seen   time.Time `json:"seen,omitzero"`
	Fenced time.Time `json:"fenced,omitzero"`
	Ready  time.Time `json:"ready,omitzero"`
}

// CandidateInfo is written by a coordinator candidate beside its election
// key, under the same lease: the node that runs in the candidate's process,
// if any. The candidate waiting behind it watches that node's liveness and,
// once its process is confirmed gone, deletes its election key instead of
// waiting for its lease to expire.
type CandidateInfo struct {
	ID   string `json:"id"`
	Node string `json:"node,omitempty"`
	// Migrations says which migrations the candidate carries out once it
	// leads: walctl migrate (and its -dry-run) refuses up front a target
	// the leader would refuse. Nil from a candidate that does not say (an
	// older one, or one not told its entries): the leader decides alone.
	Migrations *MigrationTargets `json:"migrations,omitempty"`
}

// MigrationTargets are the migrations a coordinator candidate carries
// out (CandidateInfo.Migrations).
type MigrationTargets struct {
	// Chains is false for a candidate that runs without chains: it refuses
	// every migrate request.
	Chains bool `json:"chains"`
	// Backends are the names of the backend entries a migration may
	// target, sorted: those of the nodes' configuration the candidate
	// runs with.
	Backends []string `json:"backends,omitempty"`
}

// MoveRequest asks the coordinator to move a channel to a node ("" for the
// least loaded other node).
type MoveRequest struct {
	To string `json:"to,omitempty"`
}

// MigrateRequest asks the coordinator to move a channel's writes to
// another backend: a new segment of its chain (package chain) on the
// backend entry To, opened by the owner the coordinator assigns at the
// migration's term. It stays until the chain ends on To (the coordinator
// deletes it then) or the coordinator refuses it (MoveRefusal, Kind
// "migrate").
type MigrateRequest struct {
	// To is the backend entry's name in the nodes' configuration.
	To string `json:"to"`
	// By says who asked ("walctl@host"), recorded in the chain's intent.
	By string `json:"by,omitempty"`
	// At is when it was asked, on the asker's clock.
	At time.Time `json:"at,omitzero"`
	// Term is written by the coordinator, with the assignment at the
	// migration's term: the term whose open seals the old segment. 0
	// until then. A request whose chain ends on To with Term 0 was on To
	// before it was made (refused: nothing to do); with Term set, done.
	Term int64 `json:"term,omitempty"`
}

// DrainRequest asks the coordinator to move every channel off a node and
// to assign it none while the request exists.
type DrainRequest struct {
	Since time.Time `json:"since"`
}

// MoveRefusal is the coordinator's record of a move or migrate request it
// deleted without honouring it, written in the same transaction as the
// deletion: whoever wrote the request (walctl) reports Reason. A channel
// has one, the last refusal of either kind.
type MoveRefusal struct {
	// Request is the ModRevision of the refused request.
	Request int64  `json:"request"`
	Reason  string `json:"reason"`
	// Kind is the request's kind: "" for a move, RefusedMigrate for a
	// migration.
	Kind string `json:"kind,omitempty"`
}

// RefusedMigrate is MoveRefusal.Kind of a refused MigrateRequest.
const RefusedMigrate = "migrate"

// envelope carries a value with its format version.
type envelope[T any] struct {
	V     int `json:"v"`
	Value T   `json:"value"`
}

// Encode returns the stored form of v.
func Encode[T NodeInfo | Assignment | Opened | MoveRequest | MigrateRequest | DrainRequest | MoveRefusal | CandidateInfo](v T) []byte {
	b, err := json.Marshal(envelope[T]{V: formatVersion, Value: v})
	if err != nil {
		panic(fmt.Sprintf("cluster: encode %T: %v", v, err)) // plain structs always encode
	}
	return b
}

// Decode decodes the value stored at key; anything but this version's form
// is ErrCorrupt naming the key.
func Decode[T NodeInfo | Assignment | Opened | MoveRequest | MigrateRequest | DrainRequest | MoveRefusal | CandidateInfo](key string, data []byte) (T, error) {
	var e envelope[T]
	if err := json.Unmarshal(data, &e); err != nil {
		return e.Value, errors.WithStack(fmt.Errorf("%s: %w: %w", key, err, ErrCorrupt))
	}
	if e.V != formatVersion {
		return e.Value, errors.Wrapf(ErrCorrupt, "%s: format version %d (this streamwal reads %d)", key, e.V, formatVersion)
	}
	return e.Value, nil
}

// ValidateNodeID reports an error for a node ID that cannot be a key
// component: the rules of channel names.
func ValidateNodeID(id string) error {
	if err := walimpls.ValidateChannelName(id); err != nil {
		return errors.Wrapf(err, "node id")
	}
	return nil
}
