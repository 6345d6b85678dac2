package node

import (
	"fmt"
	"net/http"
)

// liveness serves cluster.LivenessPath: the stream the coordinator's
// failure detection holds open to this node. It answers 200 and the
// node's ID, flushes, and then holds the request until the caller goes
// or the node stops (Shutdown ends it before it stops serving). Its end
// only makes the coordinator look again: what moves channels is a
// connection to this address refused, i.e. this process gone.
//
// A request naming another node is 404 (the caller's registration of that
// node points here by mistake); one during Shutdown is 503.
func (n *Node) liveness(w http.ResponseWriter, r *http.Request) {
	if id := r.URL.Query().Get("node"); id != "" && id != n.cfg.ID {
		http.Error(w, fmt.Sprintf("this is node %s, not %s", n.cfg.ID, id), http.StatusNotFound)
		return
	}
	if n.ctx.Err() != nil || !n.accepting.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintln(w, n.cfg.ID)
	_ = http.NewResponseController(w).Flush()
	select {
	case <-r.Context().Done():
	case <-n.ctx.Done():
	}
}
