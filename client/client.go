// Package client appends to and reads from a streamwal cluster: it finds a
// channel's owner in the cluster's assignments (a cluster.View on etcd),
// sends there, and when the node answers that it does not own the channel,
// was fenced, or is unavailable, finds the owner again and retries, within
// the caller's context.
//
// # Outcomes and retries
//
// Append returns nil only when the message is stored. Every append carries
// an idempotency key (the caller's, or a random one). When an attempt ends
// with an unknown outcome (the node answered so, the connection broke, the
// node died), the client retries with the same key and retry set: the owner
// then looks for a copy stored by the earlier attempt — on itself or on a
// previous owner — and answers with that copy instead of storing a second
// one. So each appended message is delivered at most once, and exactly once
// when Append returns nil. When Append returns an error, errors.Is(err,
// ErrOutcomeUnknown) says whether an earlier attempt may have stored it: a
// later Append with the same Options.Key resolves it the same way; an error
// without it stored nothing.
//
// The errors carry their sentinels (ErrOutcomeUnknown, ErrRefused,
// ErrClosed, a context's end) for the standard library's errors.Is and
// cockroachdb/errors' alike, with the node's or the connection's error
// kept beneath them.
//
// # Following the owner
//
// An attempt in flight is watched against the cluster's assignments: when
// they show that its node no longer owns the channel (the channel was
// assigned to another node at a higher term, or the node's registration
// is gone: its lease expired), the attempt is abandoned and the append
// retried at the new owner at once, as an attempt of unknown outcome.
// So an append sent to an owner that stalls (a stopped process, a
// partition) is answered about when the cluster moves the channel, not
// when the caller's context ends; the stalled owner, fenced by the new
// owner's open, acknowledges nothing it could still store after that.
// The new owner is tried as soon as it is assigned: it waits for its own
// open of the channel if that is in flight.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/utility/backoff"
)

// Errors, checked with errors.Is.
var (
	// ErrOutcomeUnknown marks an Append error after an attempt that may have
	// stored the message.
	ErrOutcomeUnknown = errors.New("client: append outcome unknown")
	// ErrRefused is a request the cluster refuses for good (bad input, a
	// message too large, no or bad credentials, no permission); nothing
	// was stored.
	ErrRefused = errors.New("client: request refused")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("client: closed")
)

// Config configures a Client. Etcd is required; the rest has defaults.
type Config struct {
	// Etcd is the cluster's etcd client; the caller owns it.
	Etcd *clientv3.Client
	// Root is the cluster's root in etcd; default cluster.DefaultRoot.
	Root string
	// HTTP is the client for the nodes' API, used for every call as it
	// is; it must carry the TLS settings itself. Default: HTTP clients
	// with a 10 s dial and response-header timeout and no overall timeout
	// (reads stream), speaking TLS with the TLS below (see TLS).
	HTTP *http.Client
	// TLS, when set, makes the client reach the nodes over TLS (https) with
	// it: appends and the other short calls over HTTP/1.1, up to
	// MaxConnsPerNode connections to a node, and reads over HTTP/2, every
	// read to a node on one connection. It holds the CAs that verify the
	// nodes and, for nodes that require one, a client certificate, e.g. a
	// tlsconf.Config's Client(). A certificate a node refuses (or that the
	// client refuses) fails the call at once with ErrRefused: nothing was
	// stored. Nil: plaintext.
	TLS *tls.Config
	// Retry is the backoff between attempts while no owner answers.
	Retry backoff.Config
	// Logger receives the client's logs; nil discards them.
	Logger *slog.Logger
	// Token, when set, is sent to the nodes as "Authorization: Bearer
	// <Token>" (nodes with authorization on, package security/authz).
	// Send it only over TLS beyond loopback.
	Token string
}

// Client is safe for concurrent use.
type Client struct {
	cfg    Config
	view   *cluster.View
	layout cluster.Layout
	log    *slog.Logger

	// calls and reads are the HTTP clients of the short calls and of the
	// reads' streams: Config.HTTP for both, or by default over TLS two of
	// their own (see defaultHTTP).
	calls, reads *http.Client

	mu     sync.Mutex
	closed bool
	conns  map[string]nodeConn // by node address
	// resolveFrom is, per channel, the resolve_from of the newest append
	// acknowledged to this client: the start of a retry's look.
	resolveFrom map[string]resolvePoint
	// looked is, per channel, the revisions of the assignment and the open
	// report the last owner lookup saw: a retry's pause ends when either
	// changes.
	looked map[string][2]int64

	moves *moves // abandons the attempts whose owner moved away (moves.go)
}

type resolvePoint struct {
	text string
	tt   uint64
}

// New returns a client following the cluster's assignments.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Etcd == nil {
		return nil, errors.Wrap(ErrRefused, "client: an etcd client is required")
	}
	layout, err := cluster.NewLayout(cfg.Root)
	if err != nil {
		return nil, errmark.Mark(err, ErrRefused)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	calls, reads := cfg.HTTP, cfg.HTTP
	switch {
	case cfg.HTTP != nil: // yours, as it is
	case cfg.TLS == nil:
		calls = defaultHTTP(nil, false) // plaintext: HTTP/1.1 for both
		reads = calls
	default:
		calls, reads = defaultHTTP(cfg.TLS, false), defaultHTTP(cfg.TLS, true)
	}
	view, err := cluster.Watch(ctx, cfg.Etcd, layout, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, view: view, layout: layout, log: cfg.Logger, moves: newMoves(view), calls: calls, reads: reads,
		conns: map[string]nodeConn{}, resolveFrom: map[string]resolvePoint{}, looked: map[string][2]int64{}}, nil
}

// Close stops following the cluster; idempotent.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.moves.close()
	c.view.Close()
	for _, h := range []*http.Client{c.calls, c.reads} {
		if t, ok := h.Transport.(*http.Transport); ok {
			t.CloseIdleConnections()
		}
	}
}

// View is the cluster as the client follows it.
func (c *Client) View() *cluster.View { return c.view }

// nodeConn is the API of one node, through the client's two HTTP clients.
type nodeConn struct {
	calls, reads streamwalv1connect.WALServiceClient
}

// conn is the API of the node at addr for the short calls.
func (c *Client) conn(addr string) (streamwalv1connect.WALServiceClient, error) {
	nc, err := c.nodeConn(addr)
	return nc.calls, err
}

// readConn is the API of the node at addr for reads.
func (c *Client) readConn(addr string) (streamwalv1connect.WALServiceClient, error) {
	nc, err := c.nodeConn(addr)
	return nc.reads, err
}

func (c *Client) nodeConn(addr string) (nodeConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nodeConn{}, ErrClosed
	}
	nc, ok := c.conns[addr]
	if !ok {
		scheme := "http://"
		if c.cfg.TLS != nil {
			scheme = "https://"
		}
		var opts []connect.ClientOption
		if c.cfg.Token != "" {
			opts = append(opts, connect.WithInterceptors(bearer(c.cfg.Token)))
		}
		nc = nodeConn{
			calls: streamwalv1connect.NewWALServiceClient(c.calls, scheme+addr, opts...),
			reads: streamwalv1connect.NewWALServiceClient(c.reads, scheme+addr, opts...),
		}
		c.conns[addr] = nc
	}
	return nc, nil
}

// Message is what Append stores.
type Message struct {
	Payload    []byte
	Properties map[string]string
	VChannel   string
}

// Options tune one Append.
type Options struct {
	// Key is the message's idempotency key; default a random one. Give your
	// own to resolve an earlier Append that ended with ErrOutcomeUnknown.
	Key string
	// Retry marks an Append that repeats one that ended with
	// ErrOutcomeUnknown (with the same Key).
	Retry bool
}

// Result is where a message was stored.
type Result struct {
	ID       string
	TimeTick uint64
	Term     int64
	Node     string
	// Duplicate is true when an earlier attempt had stored it.
	Duplicate bool
}

// Append stores m on channel, retrying until it is stored, refused, or ctx
// ends.
func (c *Client) Append(ctx context.Context, channel string, m Message, opts Options) (Result, error) {
	key := opts.Key
	if key == "" {
		key = newKey()
	}
	retry := opts.Retry
	c.mu.Lock()
	from := c.resolveFrom[channel].text
	c.mu.Unlock()
	var hint *streamwalv1.WrongNode // an owner a refusal named
	for attempt := 0; ; attempt++ {
		tg, err := c.owner(ctx, channel, hint, attempt)
		if err != nil {
			return Result{}, c.final(err, retry)
		}
		addr := tg.addr
		cl, err := c.conn(addr)
		if err != nil {
			return Result{}, c.final(err, retry)
		}
		req := connect.NewRequest(&streamwalv1.AppendRequest{Channel: channel, Key: key, Retry: retry, ResolveFrom: from,
			Message: &streamwalv1.Message{Payload: m.Payload, Properties: m.Properties, Vchannel: m.VChannel}})
		actx, watched := c.moves.watch(ctx, channel, tg)
		resp, err := cl.Append(actx, req)
		moved := watched()
		if err == nil {
			r := resp.Msg
			c.noteAck(channel, r)
			return Result{ID: r.GetId(), TimeTick: r.GetTimetick(), Term: r.GetTerm(), Node: tg.node, Duplicate: r.GetDuplicate()}, nil
		}
		hint = nil
		if moved && ctx.Err() == nil {
			// Abandoned: its node no longer owns the channel. Whether it
			// stored the message is unknown; the new owner resolves it.
			retry = true
			c.log.Debug("append attempt abandoned: the channel moved", "channel", channel, "node", tg.node, "term", tg.term)
			continue
		}
		if terr := c.tlsRefusal(ctx, addr, err); terr != nil {
			return Result{}, c.final(errmark.Mark(errors.Wrapf(terr, "client: append to %q at %s", channel, addr), ErrRefused), retry)
		}
		code := connect.CodeOf(err)
		wn, notStored := details(err)
		if !notStored {
			retry = true // this attempt may have stored it: the next one resolves
		}
		switch {
		case ctx.Err() != nil:
			// Both causes stay visible to errors.Is: the context's end and
			// the last attempt's error (fmt.Errorf: cockroachdb's Newf takes
			// one %w).
			return Result{}, c.final(fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err), retry)
		case refused(code):
			return Result{}, c.final(errmark.Mark(err, ErrRefused), retry)
		case wn != nil && wn.GetOwnerAddr() != "" && wn.GetOwnerAddr() != addr:
			// Try where the node says the owner is, when it knows a newer
			// term than the attempt's: a new owner that has not yet seen
			// its assignment names the old one.
			if wn.GetTerm() > tg.term {
				hint = wn
			}
		}
		c.log.Debug("append attempt failed", "channel", channel, "node", tg.node, "code", code, "not_stored", notStored, "error", err)
	}
}

// final is the error Append returns: marked ErrOutcomeUnknown when an
// attempt may have stored the message.
func (c *Client) final(err error, unknown bool) error {
	if unknown {
		return errmark.Mark(err, ErrOutcomeUnknown)
	}
	return err
}

// noteAck keeps the newest resolve_from of channel.
func (c *Client) noteAck(channel string, r *streamwalv1.AppendResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.resolveFrom[channel]; !ok || r.GetTimetick() > cur.tt {
		c.resolveFrom[channel] = resolvePoint{text: r.GetResolveFrom(), tt: r.GetTimetick()}
	}
}

// details returns an API error's WrongNode detail and whether it says
// nothing was stored. An error without an Outcome (a broken connection, a
// node that died) leaves the outcome unknown.
func details(err error) (*streamwalv1.WrongNode, bool) {
	wn, _ := detail[*streamwalv1.WrongNode](err)
	o, _ := detail[*streamwalv1.Outcome](err)
	return wn, o.GetNotStored()
}

// detail returns the first detail of type T an API error carries.
func detail[T proto.Message](err error) (T, bool) {
	var zero T
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return zero, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if x, ok := v.(T); ok {
				return x, true
			}
		}
	}
	return zero, false
}

// owner returns channel's owner: the one a refusal named (hint), else the
// assignment, waiting (with backoff after a failed attempt) for one to a
// live node. The backoff ends early when the channel's assignment or its
// owner's open report changes: a new owner, or one that has just opened
// the channel, is worth trying at once.
func (c *Client) owner(ctx context.Context, channel string, hint *streamwalv1.WrongNode, attempt int) (target, error) {
	if hint != nil {
		s, _ := c.view.Snapshot()
		_, registered := s.Nodes[hint.GetOwner()]
		return target{addr: hint.GetOwnerAddr(), node: hint.GetOwner(), term: hint.GetTerm(), registered: registered}, nil
	}
	if attempt > 0 {
		if err := c.pause(ctx, channel, attempt-1); err != nil {
			return target{}, err
		}
	}
	s, err := c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		_, _, ok := s.Owner(channel)
		return ok
	})
	if err != nil {
		return target{}, errors.Wrapf(err, "client: no live owner of channel %q", channel)
	}
	a, n, _ := s.Owner(channel)
	c.mu.Lock()
	c.looked[channel] = revisions(s, channel)
	c.mu.Unlock()
	return target{addr: n.Addr, node: a.Node, term: a.Term, registered: true}, nil
}

// pause waits for the backoff of attempt, or until channel's assignment or
// open report is not the one the last lookup saw, whichever comes first.
func (c *Client) pause(ctx context.Context, channel string, attempt int) error {
	c.mu.Lock()
	looked := c.looked[channel]
	c.mu.Unlock()
	clock := c.cfg.Retry.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	t := clock.NewTimer(c.cfg.Retry.Delay(attempt))
	defer t.Stop()
	for {
		s, changed := c.view.Snapshot()
		if revisions(s, channel) != looked {
			return nil
		}
		select {
		case <-changed:
		case <-t.Chan():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// revisions are the revisions of channel's assignment and open report in s.
func revisions(s cluster.Snapshot, channel string) [2]int64 {
	return [2]int64{s.Assignments[channel].Revision, s.Opened[channel].Revision}
}

// newKey returns a random idempotency key.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// refused reports whether a code is a refusal for good: retrying cannot
// change it.
func refused(code connect.Code) bool {
	switch code {
	case connect.CodeInvalidArgument, connect.CodeResourceExhausted, connect.CodeOutOfRange,
		connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return true
	}
	return false
}

// bearer sets the Authorization header of every request.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// BearerInterceptor returns the connect interceptor that sends token as a
// bearer token, for callers that make their own API clients (walctl).
func BearerInterceptor(token string) connect.Interceptor { return bearer(token) }
