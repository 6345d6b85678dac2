package node

import (
	"fmt"
	"net/http"
	"time"

	"github.com/streamwal/streamwal/cluster"
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
func (n *Node) liveness(w http.ResponseWriter, r *http.Request) {
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
		interval = min(max(interval, cluster.MinHeartbeat), cluster.MaxHeartbeat)
		w.Header().Set(cluster.LivenessHeartbeatHeader, interval.String())
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_, _ = fmt.Fprintln(w, n.cfg.ID)
	_ = rc.Flush()
	var beat <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		beat = t.C
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-n.ctx.Done():
			return
		case <-beat:
			if _, err := w.Write([]byte("\n")); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}
