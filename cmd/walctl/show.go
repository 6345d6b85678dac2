package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
)

// statusTimeout bounds one Status call to a node.
const statusTimeout = 5 * time.Second

// snapshot reads the cluster as it is now.
func (c *ctl) snapshot(ctx context.Context) (cluster.Snapshot, error) {
	return cluster.Load(ctx, c.cli, c.layout, nil)
}

func (c *ctl) nodes(ctx context.Context) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	count := map[string]int{}
	for _, a := range s.Assignments {
		count[a.Value.Node]++
	}
	ids := sortedKeys(s.Nodes)
	if c.json {
		enc := json.NewEncoder(c.out)
		for _, id := range ids {
			n := s.Nodes[id].Value
			_, drained := s.Drains[id]
			if err := enc.Encode(map[string]any{"id": id, "addr": n.Addr, "started": n.Started, "channels": count[id], "drained": drained}); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tADDR\tCHANNELS\tSTARTED\tDRAINED")
	for _, id := range ids {
		n := s.Nodes[id].Value
		_, drained := s.Drains[id]
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%v\n", id, n.Addr, count[id], n.Started.Format(time.RFC3339), drained)
	}
	return w.Flush()
}

func (c *ctl) channels(ctx context.Context) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	names := sortedKeys(s.Assignments)
	var statuses map[string]*streamwalv1.ChannelStatus
	var chains map[string]chain.Chain
	if c.opts.verbose {
		statuses = c.ownerStatuses(ctx, s)
		if chains, err = c.readChains(ctx, names); err != nil {
			fmt.Fprintf(c.errOut, "walctl: the chains could not be read (backends not shown): %v\n", err)
		}
	}
	if c.json {
		enc := json.NewEncoder(c.out)
		for _, name := range names {
			a := s.Assignments[name].Value
			_, live := s.Nodes[a.Node]
			v := map[string]any{"channel": name, "owner": a.Node, "term": a.Term, "state": a.State,
				"owner_live": live, "since": a.Since, "previous": a.Previous, "open_error": s.Opened[name].Value.Error}
			if c.opts.verbose {
				v["move"] = movePhasesOf(s, name, firstAppend(statuses[name]))
				v["chain"] = chainOf(s, chains, name)
				if r := retentionOfStatus(statuses[name]); r != nil {
					v["retention"] = r
				}
			}
			if err := enc.Encode(v); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	if c.opts.verbose {
		fmt.Fprintln(w, "CHANNEL\tOWNER\tTERM\tSTATE\tSINCE\tDETECTED\tDECIDE\tFENCE\tTAIL\tFIRST\tBACKEND\tSEGMENT\tMIGRATION\tRETAINED\tOLDEST\tHELD BY")
	} else {
		fmt.Fprintln(w, "CHANNEL\tOWNER\tTERM\tSTATE\tSINCE")
	}
	for _, name := range names {
		a := s.Assignments[name].Value
		state := string(a.State)
		if _, live := s.Nodes[a.Node]; !live {
			state += " (owner gone)"
		}
		if o := s.Opened[name].Value; o.Error != "" && o.Term == a.Term {
			state += " (open failed: " + o.Error + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s", name, a.Node, a.Term, state, a.Since.Format(time.RFC3339))
		if c.opts.verbose {
			m := movePhasesOf(s, name, firstAppend(statuses[name]))
			detected := "-"
			if m.Detected != nil {
				detected = m.Detected.Format(time.RFC3339Nano)
			}
			fmt.Fprintf(w, "\t%s\t%s\t%s\t%s\t%s", detected, phase(m.DecideMS), phase(m.FenceMS), phase(m.TailMS), phase(m.FirstMS))
			ci := chainOf(s, chains, name)
			backend, seg := "-", "-"
			if ci.Backend != "" {
				backend, seg = ci.Backend, fmt.Sprint(ci.Segment)
			}
			fmt.Fprintf(w, "\t%s\t%s\t%s", backend, seg, orDash(ci.migrationText()))
			fmt.Fprintf(w, "\t%s", retentionColumns(retentionOfStatus(statuses[name])))
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

// chainInfo is what channels -v and explain say of a channel's chain.
type chainInfo struct {
	// Backend is where the channel writes (entry/channel), Segment its
	// index; "" when the channel has no chain (or it was not read).
	Backend string `json:"backend,omitempty"`
	Segment uint64 `json:"segment"`
	// Segments is how many segments the chain keeps.
	Segments int `json:"segments,omitempty"`
	// Pending is the migration pending in the chain, if any.
	Pending *chain.Migration `json:"pending,omitempty"`
	// Request is the channel's migrate request, if any.
	Request *cluster.MigrateRequest `json:"migrate_request,omitempty"`

	// Kept names the kept segments, oldest first ("<index>
	// <entry>/<channel>"), and Entry is the last one's backend entry
	// (explain; not in the JSON, whose backend says it).
	Kept  []string `json:"-"`
	Entry string   `json:"-"`
}

func chainOf(s cluster.Snapshot, chains map[string]chain.Chain, channel string) chainInfo {
	var ci chainInfo
	if c, ok := chains[channel]; ok {
		last := c.Last()
		ci.Backend, ci.Segment, ci.Segments, ci.Pending, ci.Entry = last.Backend.String(), last.Index, len(c.Segments), c.Pending, last.Backend.Name
		for _, seg := range c.Segments {
			ci.Kept = append(ci.Kept, fmt.Sprintf("%d %s", seg.Index, seg.Backend))
		}
	}
	if r, ok := s.Migrations[channel]; ok {
		req := r.Value
		ci.Request = &req
	}
	return ci
}

// migrationText says what migration the channel has pending or
// requested ("" for none).
func (ci chainInfo) migrationText() string {
	switch {
	case ci.Pending != nil:
		return fmt.Sprintf("to %s at term %d (by %s)", ci.Pending.Target, ci.Pending.Term, ci.Pending.By)
	case ci.Request != nil:
		return fmt.Sprintf("requested to %s (by %s)", ci.Request.To, ci.Request.By)
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// movePhases times how a channel came to its owner at its term, in
// milliseconds; a phase is nil when unknown (the owner has not reported
// the open's times, or no append was acknowledged at the term yet).
type movePhases struct {
	Detected *time.Time `json:"detected,omitempty"`
	DecideMS *float64   `json:"decide_ms,omitempty"`
	FenceMS  *float64   `json:"fence_ms,omitempty"`
	TailMS   *float64   `json:"tail_ms,omitempty"`
	FirstMS  *float64   `json:"first_append_ms,omitempty"`
}

// movePhasesOf reads the phases of channel's move to its owner from the
// assignment, the owner's Opened report and first, the owner's first
// acknowledged append at the term (zero when unknown).
func movePhasesOf(s cluster.Snapshot, channel string, first time.Time) movePhases {
	a, o := s.Assignments[channel].Value, s.Opened[channel].Value
	var m movePhases
	if !a.Detected.IsZero() {
		d := a.Detected
		m.Detected = &d
	}
	if o.Node != a.Node || o.Term != a.Term || o.Ready.IsZero() {
		return m
	}
	ms := func(from, to time.Time) *float64 {
		if from.IsZero() || to.IsZero() {
			return nil
		}
		v := float64(to.Sub(from).Microseconds()) / 1000
		return &v
	}
	from := a.Since
	if !a.Detected.IsZero() {
		from = a.Detected
	}
	m.DecideMS, m.FenceMS, m.TailMS, m.FirstMS = ms(from, o.Seen), ms(o.Seen, o.Fenced), ms(o.Fenced, o.Ready), ms(o.Ready, first)
	return m
}

// phase prints a phase's milliseconds, or "-".
func phase(ms *float64) string {
	if ms == nil {
		return "-"
	}
	return strconv.FormatFloat(*ms, 'f', 1, 64) + "ms"
}

// ownerStatuses asks every live owner in s for its status and returns,
// per channel it holds at its assigned term, its status there (the first
// acknowledged append, what the log retains). An owner that does not
// answer leaves its channels out.
func (c *ctl) ownerStatuses(ctx context.Context, s cluster.Snapshot) map[string]*streamwalv1.ChannelStatus {
	out := map[string]*streamwalv1.ChannelStatus{}
	asked := map[string]bool{}
	for _, v := range s.Assignments {
		a := v.Value
		n, live := s.Nodes[a.Node]
		if !live || asked[a.Node] || n.Value.Addr == "" {
			continue
		}
		asked[a.Node] = true
		st, err := c.status(ctx, n.Value.Addr)
		if err != nil {
			fmt.Fprintf(c.errOut, "walctl: node %s did not answer its status: %v\n", a.Node, err)
			continue
		}
		for _, cs := range st.GetChannels() {
			if as, ok := s.Assignments[cs.GetName()]; ok && as.Value.Node == a.Node && as.Value.Term == cs.GetTerm() {
				out[cs.GetName()] = cs
			}
		}
	}
	return out
}

// firstAppend is the time of the first append acknowledged at the term of
// cs; zero when unknown.
func firstAppend(cs *streamwalv1.ChannelStatus) time.Time {
	if cs.GetFirstAppend() == nil {
		return time.Time{}
	}
	return cs.GetFirstAppend().AsTime()
}

// errUnknownChannel is the answer for a channel without an assignment.
func errUnknownChannel(channel string) error {
	return errors.Newf("unknown channel %q: it has no assignment (walctl channels lists the channels)", channel)
}

// liveNodes returns the registered, undrained nodes other than except,
// sorted.
func liveNodes(s cluster.Snapshot, except string) []string {
	var out []string
	for id := range s.Nodes {
		if _, drained := s.Drains[id]; !drained && id != except {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// channelsOf returns the channels assigned to node, sorted.
func channelsOf(s cluster.Snapshot, node string) []string {
	var out []string
	for ch, a := range s.Assignments {
		if a.Value.Node == node {
			out = append(out, ch)
		}
	}
	slices.Sort(out)
	return out
}

// explanation is what explain says of a channel.
type explanation struct {
	Channel      string          `json:"channel"`
	Owner        string          `json:"owner"`
	OwnerAddr    string          `json:"owner_addr,omitempty"`
	OwnerLive    bool            `json:"owner_live"`
	OwnerDrained bool            `json:"owner_drained"`
	Term         int64           `json:"term"`
	State        cluster.State   `json:"state"`
	Since        time.Time       `json:"since"`
	Previous     []cluster.Owner `json:"previous,omitempty"`
	Serving      bool            `json:"serving"`
	// Why says why the channel is not serving (or serving badly).
	Why string `json:"why,omitempty"`
	// From the owner's Status.
	NodeState    string     `json:"node_state,omitempty"`
	Health       string     `json:"health,omitempty"`
	HealthReason string     `json:"health_reason,omitempty"`
	AppendsOK    uint64     `json:"appends_ok"`
	AppendsFail  uint64     `json:"appends_failed"`
	Waiting      uint32     `json:"appends_waiting"`
	LastAppend   *time.Time `json:"last_append,omitempty"`
	LastAppendID string     `json:"last_append_id,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	Readers      uint32     `json:"readers"`
	ReaderLagMS  *int64     `json:"slowest_reader_lag_ms,omitempty"`
	// Backend is the backend entry the channel writes on: its chain's last
	// segment's, or (a channel without a chain) its owner's backend.
	Backend string `json:"backend,omitempty"`
	// Retained says what the log retains in one line; Retention is the
	// owner's measure (nil when unknown), Consumers the channel's
	// consumers, the slowest first (checkpoints.go).
	Retained    string         `json:"retained"`
	Retention   *retentionView `json:"retention,omitempty"`
	Consumers   []consumerView `json:"consumers,omitempty"`
	MoveRequest *string        `json:"move_request,omitempty"`
	// LastRefusal is the coordinator's reason for dropping the last move
	// or migrate request of the channel it refused, if any.
	LastRefusal string `json:"last_refusal,omitempty"`
	// Chain is where the channel writes, and its migration.
	Chain chainInfo `json:"chain"`

	// consumersRead: Consumers were read (none is an answer).
	consumersRead bool
}

// explain says why a channel serves or not.
func (c *ctl) explain(ctx context.Context, channel string) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	av, ok := s.Assignments[channel]
	if !ok {
		if len(liveNodes(s, "")) == 0 {
			return errors.Newf("%v; the cluster has no live node, so no channel gets one", errUnknownChannel(channel))
		}
		return errUnknownChannel(channel)
	}
	a := av.Value
	x := explanation{Channel: channel, Owner: a.Node, Term: a.Term, State: a.State, Since: a.Since, Previous: a.Previous}
	n, live := s.Nodes[a.Node]
	_, drained := s.Drains[a.Node]
	x.OwnerLive, x.OwnerDrained, x.OwnerAddr = live, drained, n.Value.Addr
	if m, ok := s.Moves[channel]; ok {
		to := m.Value.To
		x.MoveRequest = &to
	}
	if r, err := c.lastRefusal(ctx, channel); err == nil {
		x.LastRefusal = r
	}
	if chains, err := c.readChains(ctx, []string{channel}); err == nil {
		x.Chain = chainOf(s, chains, channel)
	} else {
		fmt.Fprintf(c.errOut, "walctl: the chain of %s could not be read: %v\n", channel, err)
	}
	others := liveNodes(s, a.Node)
	opened := s.Opened[channel].Value
	age := func(t time.Time) string { return time.Since(t).Round(time.Second).String() }
	switch {
	case !live || drained:
		why := fmt.Sprintf("its owner %s is not live (its lease is gone)", a.Node)
		if live {
			why = fmt.Sprintf("its owner %s is drained", a.Node)
		}
		if len(others) == 0 {
			why += "; no live node can take it"
		} else {
			why += fmt.Sprintf("; the coordinator moves it to another live node (%s) at term %d", strings.Join(others, ", "), a.Term+1)
		}
		x.Why = why
	case a.State == cluster.Assigning && opened.Node == a.Node && opened.Term == a.Term && opened.Error != "":
		x.Why = fmt.Sprintf("open failing on %s at term %d: %s (assigned %s ago)", a.Node, a.Term, opened.Error, age(a.Since))
	}
	if live {
		st, err := c.status(ctx, n.Value.Addr)
		switch {
		case err != nil:
			if x.Why == "" {
				x.Why = fmt.Sprintf("its owner %s does not answer at %s: %v", a.Node, n.Value.Addr, err)
			}
		default:
			x.Backend = st.GetBackend()
			c.fromStatus(&x, st)
		}
	}
	if x.Chain.Entry != "" {
		x.Backend = x.Chain.Entry
	}
	c.explainRetention(ctx, s, &x)
	if x.Why == "" && a.State == cluster.Assigning && x.NodeState != "available" {
		x.Why = fmt.Sprintf("opening on %s at term %d since %s (%s ago)", a.Node, a.Term, a.Since.Format(time.RFC3339), age(a.Since))
	}
	x.Serving = x.Why == "" && x.NodeState == "available"
	if x.Serving && x.Health != "" && x.Health != "healthy" {
		x.Why = x.Health + ": " + x.HealthReason
	}
	if c.json {
		return json.NewEncoder(c.out).Encode(x)
	}
	return c.printExplanation(x)
}

// fromStatus fills x from the owner's Status, and says why the channel is
// not serving when the owner knows.
func (c *ctl) fromStatus(x *explanation, st *streamwalv1.StatusResponse) {
	var cs *streamwalv1.ChannelStatus
	for _, s := range st.GetChannels() {
		if s.GetName() == x.Channel {
			cs = s
		}
	}
	if cs == nil || cs.GetTerm() < x.Term {
		if x.Why == "" {
			x.Why = fmt.Sprintf("%s has not started opening it at term %d", x.Owner, x.Term)
		}
		return
	}
	x.NodeState, x.Health, x.HealthReason = cs.GetState(), cs.GetHealth(), cs.GetReason()
	x.Retention = retentionOfStatus(cs)
	x.AppendsOK, x.AppendsFail, x.Waiting = cs.GetAppendsOk(), cs.GetAppendsFailed(), cs.GetAppendsWaiting()
	if cs.GetLastAppend() != nil {
		t := cs.GetLastAppend().AsTime()
		x.LastAppend = &t
	}
	x.LastAppendID, x.LastError, x.Readers = cs.GetLastAppendId(), cs.GetLastError(), cs.GetReaders()
	if lag := cs.GetSlowestReaderLagMs(); lag >= 0 {
		x.ReaderLagMS = &lag
	}
	if x.Why != "" {
		return
	}
	switch cs.GetState() {
	case "available":
	case "unavailable":
		x.Why = fmt.Sprintf("fenced on %s: %s", x.Owner, cs.GetLastError())
	case "failed":
		x.Why = fmt.Sprintf("open failing on %s: %s", x.Owner, cs.GetLastError())
	default:
		x.Why = fmt.Sprintf("%s on %s: %s", cs.GetState(), x.Owner, cs.GetReason())
	}
}

func (c *ctl) printExplanation(x explanation) error {
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	line := func(k, format string, args ...any) { fmt.Fprintf(w, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	line("channel:", "%s", x.Channel)
	owner := x.Owner
	switch {
	case !x.OwnerLive:
		owner += " (not live)"
	case x.OwnerDrained:
		owner += " (" + x.OwnerAddr + ", drained)"
	default:
		owner += " (" + x.OwnerAddr + ", live)"
	}
	line("owner:", "%s", owner)
	line("term:", "%d, %s since %s (%s ago)", x.Term, x.State, x.Since.Format(time.RFC3339), time.Since(x.Since).Round(time.Second))
	if x.Serving && x.Why == "" {
		line("serving:", "yes")
	} else if x.Serving {
		line("serving:", "yes, but %s", x.Why)
	} else {
		line("serving:", "no: %s", x.Why)
	}
	if x.Health != "" {
		h := x.Health
		if x.HealthReason != "" {
			h += " (" + x.HealthReason + ")"
		}
		line("health:", "%s", h)
		appends := fmt.Sprintf("%d ok, %d failed, %d waiting", x.AppendsOK, x.AppendsFail, x.Waiting)
		if x.LastAppend != nil {
			appends += fmt.Sprintf("; last at %s (%s ago), id %s", x.LastAppend.Format(time.RFC3339), time.Since(*x.LastAppend).Round(time.Millisecond), x.LastAppendID)
		} else {
			appends += "; none since this owner holds the term"
		}
		line("appends:", "%s", appends)
		readers := fmt.Sprintf("%d on %s", x.Readers, x.Owner)
		if x.ReaderLagMS != nil {
			readers += fmt.Sprintf(", the slowest %s behind the last append", time.Duration(*x.ReaderLagMS)*time.Millisecond)
		}
		line("readers:", "%s", readers)
	}
	if x.LastError != "" {
		line("last error:", "%s", x.LastError)
	}
	if x.Chain.Backend != "" {
		kept := ""
		if len(x.Chain.Kept) > 1 {
			kept = ": " + strings.Join(x.Chain.Kept, ", ")
		}
		line("chain:", "writes on %s (segment %d of %d kept%s)", x.Chain.Backend, x.Chain.Segment, x.Chain.Segments, kept)
	} else if x.Backend != "" {
		line("backend:", "%s", x.Backend)
	}
	printRetention(line, x)
	if m := x.Chain.migrationText(); m != "" {
		line("migration:", "%s", m)
	}
	if len(x.Previous) > 0 {
		var prev []string
		for _, p := range x.Previous {
			prev = append(prev, fmt.Sprintf("%s at term %d", p.Node, p.Term))
		}
		line("previous:", "%s (not confirmed gone when it moved)", strings.Join(prev, ", "))
	}
	if x.MoveRequest != nil {
		to := *x.MoveRequest
		if to == "" {
			to = "the least loaded other node"
		}
		line("move:", "requested, to %s; the coordinator has not acted on it yet", to)
	}
	if x.LastRefusal != "" {
		line("last refusal:", "%s", x.LastRefusal)
	}
	return w.Flush()
}

// lastRefusal returns the reason of the last move request of channel the
// coordinator refused ("" if none).
func (c *ctl) lastRefusal(ctx context.Context, channel string) (string, error) {
	resp, err := c.cli.Get(ctx, c.layout.Refusal(channel))
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	r, err := cluster.Decode[cluster.MoveRefusal](string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	if r.Kind != "" {
		return r.Kind + ": " + r.Reason, err
	}
	return r.Reason, err
}

// status asks the node at addr for its Status.
func (c *ctl) status(ctx context.Context, addr string) (*streamwalv1.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	api, closeIdle := c.nodeClient(addr, statusTimeout)
	defer closeIdle()
	resp, err := api.Status(ctx, connect.NewRequest(&streamwalv1.StatusRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
