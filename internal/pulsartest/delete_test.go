package pulsartest_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/pulsartest"
)

// waitStats polls the topic's stats until cond holds.
func waitStats(t *testing.T, b *pulsartest.Broker, topic, what string, cond func(s pulsartest.TopicStats) bool) pulsartest.TopicStats {
	t.Helper()
	var last pulsartest.TopicStats
	require.Eventuallyf(t, func() bool {
		s, err := b.Stats(topic)
		if err != nil {
			return false
		}
		last = s
		return cond(s)
	}, 10*time.Second, time.Millisecond, "%s (last stats %+v)", what, &last)
	return last
}

// A forced delete takes the topic's messages, subscriptions and state
// with it; the clients reconnect and, with auto-creation on, create the
// topic again, empty, on a new ledger. An exclusive producer coming back
// is granted with the epoch it had.
func TestDeleteTopicRecreatedByReconnectingClients(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{Logger: debugLogger()})
	c := newClient(t, b)
	topic := newTopic(t)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
	require.NoError(t, err)
	defer p.Close()
	sub, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "durable"})
	require.NoError(t, err)
	sub.Close()
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	require.NoError(t, err)
	defer r.Close()
	old := produce(t, p, "old", 3)
	got, _ := readN(t, r, 3) // caught up: a reader reconnecting with a backlog may skip (doc.go)
	require.Equal(t, names("old", 0, 3), got)

	ok, err := b.TopicExists(topic)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, b.DeleteTopic(topic))

	s := waitStats(t, b, topic, "the producer and the reader come back", func(s pulsartest.TopicStats) bool {
		return s.Producers == 1 && s.Consumers == 1
	})
	require.Zero(t, s.Entries, "a re-created topic is empty")
	require.Empty(t, s.Cursors, "the durable subscription went with the topic")
	require.Equal(t, int64(-1), s.Last.Entry)
	require.Greater(t, s.Last.Ledger, old[0].LedgerID(), "a re-created topic starts on a new ledger")
	require.Equal(t, uint64(1), s.Epoch, "the exclusive producer came back with its epoch")

	fresh := produce(t, p, "new", 2)
	require.Equal(t, int64(0), fresh[0].EntryID())
	got, _ = readN(t, r, 2)
	require.Equal(t, names("new", 0, 2), got)
	r2, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	require.NoError(t, err)
	defer r2.Close()
	got, _ = readN(t, r2, 2)
	require.Equal(t, names("new", 0, 2), got, "nothing of the deleted topic is left")

	require.ErrorIs(t, b.DeleteTopic(newTopic(t)), pulsartest.ErrTopicNotFound)
	ok, err = b.TopicExists(newTopic(t))
	require.NoError(t, err)
	require.False(t, ok, "TopicExists creates nothing")
}

// Without auto-creation a deleted topic stays deleted: nothing that comes
// back creates it.
func TestDeleteTopicWithoutAutoCreation(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{DisableAutoTopicCreation: true, Logger: debugLogger()})
	c := newClient(t, b)
	topic := newTopic(t)
	require.NoError(t, b.CreateTopic(topic))
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	require.NoError(t, err)
	defer p.Close()
	produce(t, p, "m", 2)

	require.NoError(t, b.DeleteTopic(topic))
	_, err = c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	require.ErrorContains(t, err, "TopicNotFound")
	_, err = c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	require.ErrorContains(t, err, "TopicNotFound")
	ok, err := b.TopicExists(topic)
	require.NoError(t, err)
	require.False(t, ok)
}

// adminDo sends one admin request and returns the status code and body.
func adminDo(t *testing.T, method, u, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, u, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// The admin handler unloads, deletes and reports topics over HTTP, with
// the token it was configured with; topic names are path-escaped.
func TestAdminAPI(t *testing.T) {
	const token = "secret"
	b := pulsartest.Start(t, pulsartest.Config{ServeAdmin: true, AdminToken: token, Logger: debugLogger()})
	require.True(t, strings.HasPrefix(b.AdminURL(), "http://127.0.0.1:"), b.AdminURL())
	c := newClient(t, b)
	topic := newTopic(t) + "=meta"
	local := topic[strings.LastIndexByte(topic, '/')+1:]
	base := b.AdminURL() + "/admin/v2/persistent/public/default/" + url.PathEscape(local)

	code, _ := adminDo(t, http.MethodGet, base+"/stats", token)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = adminDo(t, http.MethodGet, base+"/stats", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = adminDo(t, http.MethodGet, base+"/stats", "wrong")
	require.Equal(t, http.StatusUnauthorized, code)

	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
	require.NoError(t, err)
	defer p.Close()
	before := produce(t, p, "a", 1)
	code, body := adminDo(t, http.MethodGet, base+"/stats", token)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"Producers":1`)

	code, _ = adminDo(t, http.MethodPut, base+"/unload", token)
	require.Equal(t, http.StatusNoContent, code)
	waitStats(t, b, topic, "the producer comes back after the unload", func(s pulsartest.TopicStats) bool { return s.Producers == 1 })
	after := produce(t, p, "b", 1)
	require.Greater(t, after[0].LedgerID(), before[0].LedgerID(), "the unload moved the topic to a new ledger")

	code, body = adminDo(t, http.MethodDelete, base, token)
	require.Equal(t, http.StatusPreconditionFailed, code, "a delete without force keeps a topic in use: %s", body)
	code, _ = adminDo(t, http.MethodDelete, base+"?force=true", token)
	require.Equal(t, http.StatusNoContent, code)
	code, _ = adminDo(t, http.MethodPut, b.AdminURL()+"/admin/v2/persistent/public/default/nothing-here/unload", token)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = adminDo(t, http.MethodDelete, b.AdminURL()+"/admin/v2/persistent/public/default/nothing-here?force=true", token)
	require.Equal(t, http.StatusNotFound, code)
}

// A broker without ServeAdmin has no admin URL.
func TestNoAdminByDefault(t *testing.T) {
	b := pulsartest.Start(t, pulsartest.Config{})
	require.Empty(t, b.AdminURL())
}
