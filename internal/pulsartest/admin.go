package pulsartest

import (
	"encoding/json"
	"net"
	"net/http"
	"time"

	"github.com/cockroachdb/errors"
)

// The admin handler serves the few calls of Pulsar's admin REST API
// (/admin/v2) that code built on this broker needs besides the binary
// protocol, on its own loopback port (Config.ServeAdmin):
//
//	PUT    /admin/v2/persistent/{tenant}/{namespace}/{topic}/unload   UnloadTopic
//	DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}          delete
//	GET    /admin/v2/persistent/{tenant}/{namespace}/{topic}/stats    exists?
//
// Success is 204 No Content (200 with a JSON body for stats); a topic the
// broker does not have is 404. DELETE without force=true refuses a topic
// that still has producers, queued producers or consumers (412, as
// Pulsar's non-forced delete does); with force=true it is DeleteTopic.
// The stats body is this broker's TopicStats as JSON, not Pulsar's
// layout: callers should rely on the status code only. Errors carry
// {"reason": "..."} like Pulsar's. With Config.AdminToken set, every
// request must carry "Authorization: Bearer <token>" (else 401).
// Responses close their connection, so nothing of a client lingers.

// errTopicBusy is a non-forced delete of a topic still in use.
var errTopicBusy = errors.New("pulsartest: topic has active producers or consumers")

// startAdmin serves the admin handler on a loopback port next to the
// binary protocol's listener.
func (b *Broker) startAdmin(host string) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return errors.Wrap(err, "pulsartest: listen for admin")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /admin/v2/persistent/{tenant}/{namespace}/{topic}/unload", b.adminUnload)
	mux.HandleFunc("DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}", b.adminDelete)
	mux.HandleFunc("GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/stats", b.adminStats)
	srv := &http.Server{Handler: b.adminAuth(mux), ReadHeaderTimeout: 10 * time.Second}
	srv.SetKeepAlivesEnabled(false)
	b.admin, b.adminURL = srv, "http://"+ln.Addr().String()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("admin server failed", "err", err)
		}
	}()
	return nil
}

// AdminURL is the base URL of the admin handler ("http://127.0.0.1:port"),
// or "" unless Config.ServeAdmin is set.
func (b *Broker) AdminURL() string { return b.adminURL }

func (b *Broker) adminAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := b.cfg.AdminToken; tok != "" && r.Header.Get("Authorization") != "Bearer "+tok {
			adminError(w, http.StatusUnauthorized, "Authentication required")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminTopic is the fully qualified persistent topic a request names.
func adminTopic(r *http.Request) string {
	return "persistent://" + r.PathValue("tenant") + "/" + r.PathValue("namespace") + "/" + r.PathValue("topic")
}

func (b *Broker) adminUnload(w http.ResponseWriter, r *http.Request) {
	adminResult(w, b.UnloadTopic(adminTopic(r)))
}

func (b *Broker) adminDelete(w http.ResponseWriter, r *http.Request) {
	force := r.URL.Query().Get("force") == "true"
	name := adminTopic(r)
	adminResult(w, b.do(func(st *state) error {
		t, err := st.lookupTopic(name)
		if err != nil {
			return err
		}
		if !force && (len(t.producers) > 0 || len(t.waiters) > 0 || t.hasConsumers()) {
			return errors.Wrapf(errTopicBusy, "%s", t.name)
		}
		b.removeTopic(t)
		return nil
	}))
}

func (b *Broker) adminStats(w http.ResponseWriter, r *http.Request) {
	s, err := b.Stats(adminTopic(r))
	if err != nil {
		adminResult(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}

// adminResult answers 204 for nil, else the status err calls for.
func adminResult(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrTopicNotFound):
		adminError(w, http.StatusNotFound, "Topic not found")
	case errors.Is(err, errTopicBusy):
		adminError(w, http.StatusPreconditionFailed, "Topic has active producers/subscriptions")
	case errors.Is(err, ErrClosed):
		adminError(w, http.StatusServiceUnavailable, err.Error())
	default:
		adminError(w, http.StatusInternalServerError, err.Error())
	}
}

func adminError(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"reason": reason})
}
