package node

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
)

// refusallog.go: a flood of bad clients must not flood the log. Every
// refusal the node logs (a failed TLS handshake, a request the policy
// refuses, a peer over its caps, a liveness stream without a node
// identity) goes through a refusalHandler, which lets one line per (peer,
// reason) through per interval and counts the rest; the count is said on
// the next line let through for that key, or, if none comes, by a
// "suppressed similar refusals" line once the interval is over. The
// metrics count every refusal exactly; the log only samples them.
//
// A peer is its IP address (an IPv6 one's /64), without the port (each
// connection of one client has another): peerHost. The table of keys is bounded: once full, refusals
// of new peers share the key ("*", reason), so an attacker with many
// addresses cannot grow it.

// refusalKey is what rate-limits a refusal's log line.
type refusalKey struct{ peer, reason string }

// refusalWindow is one key's interval: when its first line was let
// through, and how many refusals were suppressed since.
type refusalWindow struct {
	until      time.Time
	suppressed int
}

// refusalLimiter decides which refusal lines are written. Safe for
// concurrent use.
type refusalLimiter struct {
	interval time.Duration
	maxKeys  int
	clock    clockwork.Clock
	// suppressed counts the lines not written.
	suppressed prometheus.Counter

	mu   sync.Mutex
	keys map[refusalKey]*refusalWindow
}

// maxRefusalKeys bounds the limiter's table.
const maxRefusalKeys = 4096

func newRefusalLimiter(interval time.Duration, clock clockwork.Clock, suppressed prometheus.Counter) *refusalLimiter {
	return &refusalLimiter{interval: interval, maxKeys: maxRefusalKeys, clock: clock, suppressed: suppressed,
		keys: map[refusalKey]*refusalWindow{}}
}

// admit decides a refusal of key at now: write reports whether its line
// is written, and prior how many lines of the key were suppressed before
// it (said on that line).
func (l *refusalLimiter) admit(key refusalKey, now time.Time) (write bool, prior int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.keys[key]
	if w == nil {
		if len(l.keys) >= l.maxKeys {
			key.peer = "*"
			w = l.keys[key]
		}
		if w == nil {
			w = &refusalWindow{}
			l.keys[key] = w
		}
	}
	if w.until.IsZero() || !now.Before(w.until) {
		prior, w.suppressed, w.until = w.suppressed, 0, now.Add(l.interval)
		return true, prior
	}
	w.suppressed++
	l.suppressed.Inc()
	return false, 0
}

// expired removes the keys whose interval is over at now and returns
// those that suppressed lines meanwhile, with their counts.
func (l *refusalLimiter) expired(now time.Time, all bool) map[refusalKey]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out map[refusalKey]int
	for k, w := range l.keys {
		if !all && now.Before(w.until) {
			continue
		}
		delete(l.keys, k)
		if w.suppressed > 0 {
			if out == nil {
				out = map[refusalKey]int{}
			}
			out[k] = w.suppressed
		}
	}
	return out
}

// refusalHandler is the slog.Handler of refusal lines: a record with a
// "reason" and a "peer" attribute is rate-limited by the limiter; any
// other record passes.
type refusalHandler struct {
	next slog.Handler
	l    *refusalLimiter
}

func (h refusalHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h refusalHandler) Handle(ctx context.Context, r slog.Record) error {
	var key refusalKey
	found := 0
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "peer":
			key.peer = peerHost(a.Value.String())
			found++
		case "reason":
			key.reason = a.Value.String()
			found++
		}
		return found < 2
	})
	if found < 2 {
		return h.next.Handle(ctx, r)
	}
	write, prior := h.l.admit(key, h.l.clock.Now())
	if !write {
		return nil
	}
	if prior > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed_before", prior))
	}
	return h.next.Handle(ctx, r)
}

func (h refusalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return refusalHandler{next: h.next.WithAttrs(attrs), l: h.l}
}

func (h refusalHandler) WithGroup(name string) slog.Handler {
	return refusalHandler{next: h.next.WithGroup(name), l: h.l}
}

// report writes a "suppressed similar refusals" line for each key whose
// interval is over (every key when all) and that suppressed lines.
func (l *refusalLimiter) report(log *slog.Logger, all bool) {
	for k, n := range l.expired(l.clock.Now(), all) {
		log.Warn("suppressed similar refusals", "peer", k.peer, "reason", k.reason, "suppressed", n, "interval", l.interval)
	}
}

// run reports the suppressed counts every interval until ctx ends, then
// reports what is left.
func (l *refusalLimiter) run(ctx context.Context, log *slog.Logger, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			l.report(log, true)
			return
		case <-tick:
			l.report(log, false)
		}
	}
}

// peerHost is who a "host:port" peer address is, as the node counts and
// rate-limits peers: its IPv4 address, or the /64 prefix of its IPv6 one
// (a host is routinely given a whole /64: counting its addresses one by
// one would let it walk around every cap). An address that is no IP is
// itself.
func peerHost(addr string) string {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.WithZone("").Prefix(64)
	if err != nil {
		return host
	}
	return p.String()
}
