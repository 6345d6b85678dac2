package pulsar

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/cockroachdb/errors"
)

// adminClient makes the calls of Pulsar's admin REST API that the binary
// protocol lacks, against Config.AdminURL:
//
//	unload   PUT    /admin/v2/persistent/{tenant}/{namespace}/{topic}/unload
//	delete   DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}?force=true
//	exists   GET    /admin/v2/persistent/{tenant}/{namespace}/{topic}/stats
//
// Each segment is path-escaped. A 2xx answer is success; 404 means the
// topic does not exist (a delete of it succeeds, exists reports false);
// anything else is an error carrying the status and the broker's reason.
// The calls are rare (take-overs and deletions), so connections are not
// kept alive: nothing of the client outlives a call. A broker that does
// not own the topic redirects (307) to the one that does; redirects keep
// the bearer token, which Go's client would otherwise drop on a change of
// host.
type adminClient struct {
	base  string // AdminURL without a trailing slash
	token string
	hc    *http.Client
}

// maxAdminRedirects bounds the redirects one admin call follows.
const maxAdminRedirects = 10

func newAdminClient(c *Config) (*adminClient, error) {
	u, err := url.Parse(c.AdminURL)
	if err != nil {
		return nil, invalid("admin url %q: %v", c.AdminURL, err)
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: c.ConnectionTimeout}).DialContext,
		TLSHandshakeTimeout: c.ConnectionTimeout,
		DisableKeepAlives:   true,
	}
	if u.Scheme == "https" {
		tc, err := c.tlsConfig(u.Host)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tc
	}
	a := &adminClient{base: strings.TrimRight(c.AdminURL, "/"), token: c.AuthToken}
	a.hc = &http.Client{
		Transport: tr,
		Timeout:   c.OperationTimeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxAdminRedirects {
				return errors.Newf("pulsar: admin call redirected %d times", len(via))
			}
			a.authorize(req)
			return nil
		},
	}
	return a, nil
}

func (a *adminClient) authorize(req *http.Request) {
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
}

// topicURL maps "persistent://tenant/namespace/local" to its admin path.
func (a *adminClient) topicURL(topic string) (string, error) {
	rest, ok := strings.CutPrefix(topic, "persistent://")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		return "", errors.Newf("pulsar: admin: %q is not a persistent://tenant/namespace/topic name", topic)
	}
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return a.base + "/admin/v2/persistent/" + strings.Join(parts, "/"), nil
}

// call makes one request and reports whether the topic was found.
func (a *adminClient) call(ctx context.Context, method, topic, suffix string) (found bool, err error) {
	u, err := a.topicURL(topic)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u+suffix, nil)
	if err != nil {
		return false, errors.Wrapf(err, "pulsar: admin %s %s", method, topic)
	}
	a.authorize(req)
	resp, err := a.hc.Do(req)
	if err != nil {
		return false, errors.Wrapf(err, "pulsar: admin %s %s", method, topic)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return true, nil
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	}
	return false, errors.Newf("pulsar: admin %s %s: %s: %s", method, topic, resp.Status, strings.TrimSpace(string(body)))
}

// unload is Config.TakeOver over the admin API.
func (a *adminClient) unload(ctx context.Context, topic string) error {
	found, err := a.call(ctx, http.MethodPut, topic, "/unload")
	if err == nil && !found {
		return errors.Newf("pulsar: admin unload %s: topic not found", topic)
	}
	return err
}

// deleteTopic is Config.DeleteTopic over the admin API: a forced delete;
// a topic that does not exist is deleted.
func (a *adminClient) deleteTopic(ctx context.Context, topic string) error {
	_, err := a.call(ctx, http.MethodDelete, topic, "?force=true")
	return err
}

// topicExists is Config.TopicExists over the admin API.
func (a *adminClient) topicExists(ctx context.Context, topic string) (bool, error) {
	return a.call(ctx, http.MethodGet, topic, "/stats")
}
