package walconfig

import (
	"bytes"
	"encoding/json"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/pulsar"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// The Params of each kind (see the package documentation): the settings
// that locate an entry's data, with their defaults applied, and never a
// secret. Fields are in a fixed order, so that one configuration always
// gives the same bytes.
type (
	localParams struct {
		Dir string `json:"dir"`
	}
	kafkaParams struct {
		SeedBrokers []string `json:"seedBrokers"`
		TopicPrefix string   `json:"topicPrefix"`
	}
	pulsarParams struct {
		ServiceURL  string `json:"serviceUrl"`
		Tenant      string `json:"tenant"`
		Namespace   string `json:"namespace"`
		TopicPrefix string `json:"topicPrefix"`
	}
	s3Params struct {
		Endpoint  string `json:"endpoint"`
		Bucket    string `json:"bucket"`
		Prefix    string `json:"prefix"`
		Region    string `json:"region"`
		PathStyle bool   `json:"pathStyle"`
	}
)

// params returns the Params of entry e as a compact JSON object; nil for a
// kind whose data nothing in its settings locates (memory) and for a kind
// walconfig does not know.
func (c Config) params(e entry) (json.RawMessage, error) {
	var v any
	switch e.kind {
	case local.Name:
		var s struct {
			Dir string `yaml:"dir"`
		}
		if err := c.lenient(e, &s); err != nil {
			return nil, err
		}
		if s.Dir == "" {
			s.Dir = DefaultLocalDir
		}
		dir, err := filepath.Abs(s.Dir)
		if err != nil {
			return nil, errors.Wrapf(err, "selector: %s: dir %s", e.path, s.Dir)
		}
		v = localParams{Dir: dir}
	case kafka.Name:
		var s struct {
			SeedBrokers []string `yaml:"seedBrokers"`
			TopicPrefix string   `yaml:"topicPrefix"`
		}
		if err := c.lenient(e, &s); err != nil {
			return nil, err
		}
		// Seed brokers are where a client starts: their order and
		// repetitions do not change the cluster.
		brokers := slices.Compact(slices.Sorted(slices.Values(s.SeedBrokers)))
		if brokers == nil {
			brokers = []string{}
		}
		if s.TopicPrefix == "" {
			s.TopicPrefix = kafka.DefaultTopicPrefix
		}
		v = kafkaParams{SeedBrokers: brokers, TopicPrefix: s.TopicPrefix}
	case pulsar.Name:
		var s struct {
			ServiceURL  string `yaml:"serviceUrl"`
			Tenant      string `yaml:"tenant"`
			Namespace   string `yaml:"namespace"`
			TopicPrefix string `yaml:"topicPrefix"`
		}
		if err := c.lenient(e, &s); err != nil {
			return nil, err
		}
		u, err := url.Parse(s.ServiceURL)
		if err != nil {
			// Not err: its text quotes the URL, which may hold a password.
			return nil, &ConfigError{File: c.file, Line: e.line(), Path: join(e.path, "serviceUrl"), Msg: "does not parse as a URL"}
		}
		u.User = nil // credentials are the entry's, never recorded
		p := pulsarParams{ServiceURL: u.String(), Tenant: s.Tenant, Namespace: s.Namespace, TopicPrefix: s.TopicPrefix}
		if p.Tenant == "" {
			p.Tenant = pulsar.DefaultTenant
		}
		if p.Namespace == "" {
			p.Namespace = pulsar.DefaultNamespace
		}
		if p.TopicPrefix == "" {
			p.TopicPrefix = pulsar.DefaultTopicPrefix
		}
		v = p
	case s3.Name:
		p, err := c.s3Params(e)
		if err != nil {
			return nil, err
		}
		v = p
	default:
		return nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, errors.Wrapf(err, "selector: %s: params", e.path)
	}
	return raw, nil
}

// s3Params are the Params of an s3 entry: its settings checked by
// s3.Config.Validate (so that a bad entry is refused at its line before
// anything is built), its endpoint without a trailing slash, and the
// defaults of prefix and region applied. An endpoint that holds user
// information is refused without being repeated: credentials come from
// credentialsFile or the AWS chain, never from what a chain records.
func (c Config) s3Params(e entry) (s3Params, error) {
	var s s3.Config
	if err := c.lenient(e, &s); err != nil {
		return s3Params{}, err
	}
	refused := func(err error) error {
		if e.node == nil {
			return &ConfigError{File: c.file, Line: e.line(), Path: e.path, Msg: err.Error(), Err: err}
		}
		return c.refusedAt(e.node, e.path, err)
	}
	if s.Endpoint != "" {
		// Not url.Parse's error, nor the value: either may hold a password.
		u, err := url.Parse(s.Endpoint)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return s3Params{}, refused(errors.Wrap(walimpls.ErrInvalidConfig, "s3: endpoint is not an http:// or https:// URL with a host"))
		}
		if u.User != nil {
			return s3Params{}, refused(errors.Wrap(walimpls.ErrInvalidConfig,
				"s3: endpoint holds user information: give credentials in credentialsFile or the AWS environment, never in the URL"))
		}
	}
	if err := s.Validate(); err != nil {
		return s3Params{}, refused(err)
	}
	p := s3Params{Endpoint: strings.TrimRight(s.Endpoint, "/"), Bucket: s.Bucket, Prefix: s.Prefix, Region: s.Region, PathStyle: s.PathStyle}
	switch p.Prefix {
	case "":
		p.Prefix = s3.DefaultPrefix
	case "/":
		p.Prefix = "" // no prefix
	}
	if p.Region == "" {
		p.Region = s3.DefaultRegion
	}
	return p, nil
}

// lenient decodes the keys of e's settings that into has, ignoring the
// others (Parse or the build checks them).
func (c Config) lenient(e entry, into any) error {
	if e.node == nil {
		return nil
	}
	if err := e.node.Decode(into); err != nil {
		return &ConfigError{File: c.file, Line: e.line(), Path: e.path, Msg: yamlMessage(err), Err: err}
	}
	return nil
}

// sameParams reports whether two Params hold the same JSON value; empty
// Params are the empty object.
func sameParams(a, b json.RawMessage) (bool, error) {
	va, err := parseParams(a)
	if err != nil {
		return false, err
	}
	vb, err := parseParams(b)
	if err != nil {
		return false, err
	}
	return reflect.DeepEqual(va, vb), nil
}

func parseParams(p json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(p)) == 0 {
		return map[string]any{}, nil
	}
	var v map[string]any
	if err := json.Unmarshal(p, &v); err != nil || v == nil {
		return nil, errors.Newf("params %s are not a JSON object", showParams(p))
	}
	return v, nil
}

// showParams is p for a message: "{}" when empty.
func showParams(p json.RawMessage) string {
	if len(bytes.TrimSpace(p)) == 0 {
		return "{}"
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, p); err != nil {
		return string(p)
	}
	return buf.String()
}
