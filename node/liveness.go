package node

import (
	"fmt"
	"net/http"
	"time"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/security/authz"
)

// liveness serves cluster.LivenessPath: the stream the coordinator's
// failure detection holds open to this node. It answers 200 and the
// node's ID, flushes, and then holds the request until the caller goes
// or the node stops (Shutdown ends it before it stops serving). Its end
// only makes the coordinator look again: what moves channels early is a
// connection to this address refused, i.e. this process gone, or this
// process silent here for its lease's TTL.
//
// Asked for heartbeats (cluster.LivenessHeartbeat), it writes an empty
// line at that interval (clamped), from this handler's own goroutine: a
// line that stops coming means this process stopped running, or the path
// to the caller broke. It says the interval in its answer's header. An
// interval it cannot parse gets no heartbeats and no header: the caller
// then falls back to the lease.
//
// A request naming another node is 404 (the caller's registration of that
// node points here by mistake); one during Shutdown is 503.
//
// Bounds (bounds.go): with TLS on, only a node may hold the stream: a
// caller without a verified node's certificate (authz.NodeName) is 403.
// A TLS configuration that verifies no client certificate verifies no
// node either, so it refuses the stream to every caller (Start warns):
// the coordinators then time this node by its lease alone, which is
// slower failure detection, never an open door. A stream ends once the node could write
// nothing on it for Config.LivenessIdle: a heartbeat the caller does not
// read within it, or, without heartbeats, at that age; heartbeats are at
// most half of it apart.
func (n *Node) liveness(w http.ResponseWriter, r *http.Request) {
	if n.cfg.TLS != nil {
		if _, err := authz.NodeName(r.TLS); err != nil {
			n.refuser.refuse(r.RemoteAddr, reasonNoNodeIdentity, "liveness stream refused: the caller is not a node", "error", err.Error())
			http.Error(w, "liveness stream: only a node may hold it: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	q := r.URL.Query()
	if id := q.Get("node"); id != "" && id != n.cfg.ID {
		http.Error(w, fmt.Sprintf("this is node %s, not %s", n.cfg.ID, id), http.StatusNotFound)
		return
	}
	if n.ctx.Err() != nil || !n.accepting.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	interval, _ := time.ParseDuration(q.Get(cluster.LivenessHeartbeat))
	if interval > 0 {
		interval = max(min(interval, cluster.MaxHeartbeat, n.cfg.LivenessIdle/2), cluster.MinHeartbeat)
		w.Header().Set(cluster.LivenessHeartbeatHeader, interval.String())
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_, _ = fmt.Fprintln(w, n.cfg.ID)
	_ = rc.Flush()
	var beat, idle <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		beat = t.C
	} else {
		idle = n.after(n.cfg.LivenessIdle)
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-n.ctx.Done():
			return
		case <-idle:
			return // the caller connects again: that is its probe
		case <-beat:
			// A caller that does not read would otherwise hold this
			// goroutine on a full socket forever.
			_ = rc.SetWriteDeadline(time.Now().Add(n.cfg.LivenessIdle))
			_, err := w.Write([]byte("\n"))
			if err == nil {
				err = rc.Flush()
			}
			if err != nil {
				if r.Context().Err() == nil && n.ctx.Err() == nil {
					n.refuser.refuse(r.RemoteAddr, reasonLivenessStalled, "liveness stream ended: its heartbeat could not be written", "error", err.Error())
				}
				return
			}
		}
	}
}
