package node

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"go.uber.org/atomic"
	"google.golang.org/protobuf/types/known/timestamppb"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/utility/hlc"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walmanager"
)

// Health values of a channel, as /admin/channels and Status report them.
const (
	// healthHealthy: no evidence of trouble (an open younger than
	// StallAfter included: it is progressing).
	healthHealthy = "healthy"
	// healthStalled: work waits without progress: appends in flight and
	// none finished for StallAfter, or an open going on for StallAfter.
	healthStalled = "stalled"
	// healthFailed: the channel cannot serve: its open failed, it was
	// fenced while still assigned here, or the last append that ended
	// failed in the node or the backend (and none succeeded since).
	healthFailed = "failed"
)

// stateAssigned is the state of a channel assigned to this node whose open
// the manager has not started yet.
const stateAssigned = "assigned"

// traffic is what the API saw of each channel: the node's own evidence of
// whether a channel makes progress. Safe for concurrent use: the map has
// its lock, and each channel's record its own, held for a few field
// updates per request.
type traffic struct {
	mu       sync.RWMutex
	channels map[string]*channelTraffic
}

func newTraffic() *traffic { return &traffic{channels: map[string]*channelTraffic{}} }

// of returns channel's record, made on first use.
func (t *traffic) of(channel string) *channelTraffic {
	t.mu.RLock()
	c := t.channels[channel]
	t.mu.RUnlock()
	if c != nil {
		return c
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c = t.channels[channel]; c == nil {
		c = &channelTraffic{readers: map[*reader]struct{}{}}
		t.channels[channel] = c
	}
	return c
}

// snapshot returns channel's record as it stands, and false if there is
// none.
func (t *traffic) snapshot(channel string) (trafficSnapshot, bool) {
	t.mu.RLock()
	c := t.channels[channel]
	t.mu.RUnlock()
	if c == nil {
		return trafficSnapshot{}, false
	}
	return c.snapshot(), true
}

// prune forgets the records of channels not in keep that have nothing in
// flight.
func (t *traffic) prune(keep map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, c := range t.channels {
		if keep[name] {
			continue
		}
		c.mu.Lock()
		idle := c.waiting == 0 && len(c.readers) == 0
		c.mu.Unlock()
		if idle {
			delete(t.channels, name)
		}
	}
}

// channelTraffic is one channel's record. The counters and the last
// append are of term; waiting, busySince, lastDone and the readers span
// terms.
type channelTraffic struct {
	mu         sync.Mutex
	term       int64
	ok, failed uint64
	firstOK    time.Time // the first append stored at term
	lastOK     time.Time
	lastID     string
	lastTT     uint64
	lastErr    string
	lastErrAt  time.Time
	failing    bool      // the last append that ended failed (node or backend), none succeeded since
	waiting    int       // appends in flight
	busySince  time.Time // when waiting last rose from 0
	lastDone   time.Time // when an append last ended, either way
	readers    map[*reader]struct{}
}

// reader is one Read stream: the timetick of the last data message it
// was sent (0 before the first).
type reader struct{ tt atomic.Uint64 }

// atTerm resets the per-term fields when term is newer than the record's.
// Holds c.mu.
func (c *channelTraffic) atTerm(term int64) {
	if term > c.term {
		c.term, c.ok, c.failed, c.failing, c.firstOK = term, 0, 0, false, time.Time{}
		c.lastOK, c.lastID, c.lastTT, c.lastErr, c.lastErrAt = time.Time{}, "", 0, "", time.Time{}
	}
}

// begin records an append of term starting at now.
func (c *channelTraffic) begin(term int64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.atTerm(term)
	if c.waiting == 0 {
		c.busySince = now
	}
	c.waiting++
}

// end records the end at now of an append begun at term: stored at
// id/tt, or failed with fault (a failure of the node or the backend); an
// append that ended with neither (refused input, a caller who gave up)
// only counts as progress.
func (c *channelTraffic) end(term int64, now time.Time, id string, tt uint64, stored bool, fault error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting--
	c.lastDone = now
	if term < c.term {
		return // of an older term: its counters are gone
	}
	c.atTerm(term)
	switch {
	case stored:
		if c.ok == 0 {
			c.firstOK = now
		}
		c.ok++
		c.failing = false
		c.lastOK, c.lastID = now, id
		c.lastTT = max(c.lastTT, tt)
	case fault != nil:
		c.failed++
		c.failing = true
		c.lastErr, c.lastErrAt = fault.Error(), now
	}
}

func (c *channelTraffic) addReader() *reader {
	r := &reader{}
	c.mu.Lock()
	c.readers[r] = struct{}{}
	c.mu.Unlock()
	return r
}

func (c *channelTraffic) removeReader(r *reader) {
	c.mu.Lock()
	delete(c.readers, r)
	c.mu.Unlock()
}

// trafficSnapshot is a channelTraffic's fields at one moment.
type trafficSnapshot struct {
	term       int64
	ok, failed uint64
	firstOK    time.Time
	lastOK     time.Time
	lastID     string
	lastTT     uint64
	lastErr    string
	lastErrAt  time.Time
	failing    bool
	waiting    int
	busySince  time.Time
	lastDone   time.Time
	readers    int
	// slowestTT is the lowest timetick the readers were sent (0 when no
	// reader was sent anything yet).
	slowestTT uint64
}

func (c *channelTraffic) snapshot() trafficSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := trafficSnapshot{term: c.term, ok: c.ok, failed: c.failed, firstOK: c.firstOK, lastOK: c.lastOK, lastID: c.lastID, lastTT: c.lastTT,
		lastErr: c.lastErr, lastErrAt: c.lastErrAt, failing: c.failing, waiting: c.waiting, busySince: c.busySince,
		lastDone: c.lastDone, readers: len(c.readers)}
	for r := range c.readers {
		if tt := r.tt.Load(); tt != 0 && (s.slowestTT == 0 || tt < s.slowestTT) {
			s.slowestTT = tt
		}
	}
	return s
}

// judgeInput is what a channel's health is judged from.
type judgeInput struct {
	// state is the manager's state of the channel at term (or
	// stateAssigned), stateErr its last error.
	state    string
	stateErr error
	// term is the term assigned to this node (0: not assigned here any
	// more), assignedSince since when; movedTo is the node it is assigned
	// to instead, if any.
	term          int64
	assignedSince time.Time
	movedTo       string
	traffic       trafficSnapshot
	now           time.Time
	stallAfter    time.Duration
}

// judge says how a channel fares, and why when not healthy: pure logic,
// no locks, no clock.
func judge(in judgeInput) (health, reason string) {
	opening := func(what string) (string, string) {
		why := what + " since " + in.assignedSince.UTC().Format(time.RFC3339)
		if !in.assignedSince.IsZero() && in.now.Sub(in.assignedSince) >= in.stallAfter {
			return healthStalled, why + " (" + in.now.Sub(in.assignedSince).Round(time.Second).String() + ")"
		}
		return healthHealthy, why
	}
	t := in.traffic
	switch {
	case in.state == walmanager.StateFailed.String():
		return healthFailed, "open failing: " + errText(in.stateErr)
	case in.state == walmanager.StateUnavailable.String() && in.term != 0:
		return healthFailed, "not available while assigned here: " + errText(in.stateErr)
	case in.state == stateAssigned:
		return opening("assigned, open not started")
	case in.state == walmanager.StateOpening.String():
		return opening("opening")
	case t.failing:
		return healthFailed, "appends failing: " + t.lastErr
	case t.waiting > 0:
		since := t.busySince
		if t.lastDone.After(since) {
			since = t.lastDone
		}
		if idle := in.now.Sub(since); idle >= in.stallAfter {
			return healthStalled, plural(t.waiting, "append") + " waiting, none finished for " + idle.Round(time.Millisecond).String()
		}
	}
	if in.term == 0 && in.movedTo != "" {
		return healthHealthy, "assigned to node " + in.movedTo + " now; closing here"
	}
	return healthHealthy, ""
}

func errText(err error) string {
	if err == nil {
		return "no error recorded"
	}
	return err.Error()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// channelReport is one channel on /admin/channels (see the README).
type channelReport struct {
	Channel string `json:"channel"`
	Term    int64  `json:"term"`
	// State is the channel's lifetime on this node (ChannelStatus.state).
	State         string     `json:"state"`
	Health        string     `json:"health"`
	Reason        string     `json:"reason,omitempty"`
	AssignedSince *time.Time `json:"assigned_since,omitempty"`
	// MovedTo names the node the channel is assigned to when it is no
	// longer this one (it is being closed here).
	MovedTo string        `json:"moved_to,omitempty"`
	Appends appendsReport `json:"appends"`
	Readers readersReport `json:"readers"`
	// LastError is the most recent failure of the channel here: a failed
	// open, a fence, or a failed append, whichever is the state's cause.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// Retention is what the channel's log retains, as this node last
	// measured it (absent before its first retention round here, and on
	// a node without consumer checkpoints).
	Retention *retentionReport `json:"retention,omitempty"`
	stats     *retention.Stats
}

type appendsReport struct {
	OK           uint64     `json:"ok"`
	Failed       uint64     `json:"failed"`
	Waiting      int        `json:"waiting"`
	First        *time.Time `json:"first,omitempty"` // the first stored at this term
	Last         *time.Time `json:"last,omitempty"`
	LastID       string     `json:"last_id,omitempty"`
	LastTimeTick uint64     `json:"last_timetick,omitempty"`
}

type readersReport struct {
	Active int `json:"active"`
	// SlowestLagMS is how far behind the last acknowledged append the
	// slowest reader is, in milliseconds of timetick; absent when unknown.
	SlowestLagMS *int64 `json:"slowest_lag_ms,omitempty"`
}

// adminReport is the body of /admin/channels.
type adminReport struct {
	Node       string          `json:"node"`
	StallAfter string          `json:"stall_after"`
	Channels   []channelReport `json:"channels"`
}

// reports describes the channels assigned to this node and those its
// manager still holds, sorted by name.
func (s *service) reports(now time.Time) []channelReport {
	n := s.n
	snap, _ := n.view.Snapshot()
	held := map[string]walmanager.ChannelStatus{}
	for _, c := range n.mgr.Channels() {
		switch c.State {
		case walmanager.StateRemoved, walmanager.StateClosed:
			continue
		}
		held[c.Name] = c
	}
	names := map[string]bool{}
	for ch, a := range snap.Assignments {
		if a.Value.Node == n.cfg.ID {
			names[ch] = true
		}
	}
	for ch := range held {
		names[ch] = true
	}
	out := make([]channelReport, 0, len(names))
	for ch := range names {
		in := judgeInput{now: now, stallAfter: n.cfg.StallAfter}
		rep := channelReport{Channel: ch}
		a, assigned := snap.Assignments[ch]
		if assigned && a.Value.Node == n.cfg.ID {
			in.term, in.assignedSince = a.Value.Term, a.Value.Since
			rep.Term = a.Value.Term
			if !a.Value.Since.IsZero() {
				since := a.Value.Since
				rep.AssignedSince = &since
			}
		} else if assigned {
			rep.MovedTo, in.movedTo = a.Value.Node, a.Value.Node
		}
		h, ok := held[ch]
		switch {
		case ok && (in.term == 0 || h.Term >= in.term):
			in.state, in.stateErr = h.State.String(), h.LastError
			rep.Term = h.Term
		default:
			in.state = stateAssigned
		}
		rep.State = in.state
		if t, ok := s.traffic.snapshot(ch); ok && t.term == rep.Term {
			in.traffic = t
		} else if ok {
			in.traffic = trafficSnapshot{waiting: t.waiting, busySince: t.busySince, lastDone: t.lastDone, readers: t.readers}
		}
		rep.Health, rep.Reason = judge(in)
		t := in.traffic
		rep.Appends = appendsReport{OK: t.ok, Failed: t.failed, Waiting: t.waiting, LastID: t.lastID, LastTimeTick: t.lastTT}
		if !t.lastOK.IsZero() {
			first, last := t.firstOK, t.lastOK
			rep.Appends.First, rep.Appends.Last = &first, &last
		}
		rep.Readers.Active = t.readers
		if t.lastTT != 0 && t.slowestTT != 0 {
			lag := max(hlc.Physical(t.lastTT).Sub(hlc.Physical(t.slowestTT)).Milliseconds(), 0)
			rep.Readers.SlowestLagMS = &lag
		}
		switch {
		case in.stateErr != nil && (in.state == walmanager.StateFailed.String() || in.state == walmanager.StateUnavailable.String()):
			rep.LastError = in.stateErr.Error()
		case t.lastErr != "":
			rep.LastError = t.lastErr
			at := t.lastErrAt
			rep.LastErrorAt = &at
		}
		if n.retainer != nil && in.term != 0 {
			if st, ok := n.retainer.Stats(ch); ok && st.Term == in.term {
				rep.Retention, rep.stats = retentionReportOf(st, now), &st
			}
		}
		out = append(out, rep)
	}
	s.traffic.prune(names)
	slices.SortFunc(out, func(a, b channelReport) int {
		switch {
		case a.Channel < b.Channel:
			return -1
		case a.Channel > b.Channel:
			return 1
		}
		return 0
	})
	return out
}

// adminChannels serves /admin/channels: the reports as JSON, all of them or
// those of ?channel=<name>.
func (s *service) adminChannels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	reps := s.reports(time.Now())
	if want := r.URL.Query().Get("channel"); want != "" {
		if err := walimpls.ValidateChannelName(want); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reps = slices.DeleteFunc(reps, func(c channelReport) bool { return c.Channel != want })
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(adminReport{Node: s.n.cfg.ID, StallAfter: s.n.cfg.StallAfter.String(), Channels: reps})
}

// statusOf maps a report to the API.
func statusOf(r channelReport) *streamwalv1.ChannelStatus {
	cs := &streamwalv1.ChannelStatus{Name: r.Channel, Term: r.Term, State: r.State, Health: r.Health, Reason: r.Reason,
		AppendsOk: r.Appends.OK, AppendsFailed: r.Appends.Failed, AppendsWaiting: uint32(max(r.Appends.Waiting, 0)),
		LastAppendId: r.Appends.LastID, LastTimetick: r.Appends.LastTimeTick, LastError: r.LastError,
		Readers: uint32(max(r.Readers.Active, 0)), SlowestReaderLagMs: -1}
	if r.AssignedSince != nil {
		cs.AssignedSince = timestamppb.New(*r.AssignedSince)
	}
	if r.Appends.Last != nil {
		cs.LastAppend = timestamppb.New(*r.Appends.Last)
	}
	if r.Appends.First != nil {
		cs.FirstAppend = timestamppb.New(*r.Appends.First)
	}
	if r.LastErrorAt != nil {
		cs.LastErrorAt = timestamppb.New(*r.LastErrorAt)
	}
	if r.Readers.SlowestLagMS != nil {
		cs.SlowestReaderLagMs = *r.Readers.SlowestLagMS
	}
	if r.stats != nil {
		cs.Retention = retentionOf(*r.stats)
	}
	return cs
}

// fault returns err when it is a failure of the node or the backend, and
// nil for a refusal of the caller's input or a caller that gave up
// (ctxErr set): only faults make a channel unhealthy.
func fault(err error, ctxErr error) error {
	if err == nil || ctxErr != nil {
		return nil
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeResourceExhausted, connect.CodeOutOfRange,
		connect.CodeCanceled, connect.CodeFailedPrecondition:
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return errors.New(ce.Message())
	}
	return err
}
