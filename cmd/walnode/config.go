package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/streamwal/streamwal/internal/s3dev"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/walconfig"
)

// retentionConfig is the configuration's retention section, its policy of
// every channel replaced by the -retention-* flags that are given.
func retentionConfig(cfg walconfig.Config, p params) (retention.Config, error) {
	rc, err := cfg.RetentionConfig()
	if err != nil {
		return retention.Config{}, err
	}
	if p.retentionMaxAge != 0 {
		rc.MaxAge = p.retentionMaxAge
	}
	if p.retentionMaxBytes != 0 {
		rc.MaxBytes = p.retentionMaxBytes
	}
	if err := rc.Validate(); err != nil {
		return retention.Config{}, errors.Wrap(err, "walnode: -retention-max-age, -retention-max-bytes")
	}
	return rc, nil
}

// backendConfig is the configuration file, or what the shortcut flags say.
func backendConfig(p params) (walconfig.Config, error) {
	if p.config != "" {
		if p.defaultBackend != "" {
			return walconfig.Config{}, errors.New("-default with -config: name the default entry in the file (default:)")
		}
		if p.s3.given() {
			return walconfig.Config{}, errors.New("-s3-* flags with -config: configure the s3 entry in the file (backends: s3:)")
		}
		// Load, not Parse: its errors name the file beside the line.
		return walconfig.Load(p.config)
	}
	if p.s3.given() && p.s3.bucket == "" && p.devS3 == "" {
		return walconfig.Config{}, errors.New("-s3-endpoint, -s3-prefix, -s3-region, -s3-path-style and -s3-credentials-file configure the s3 backend of -s3-bucket (or -dev-s3): give it")
	}
	if p.devS3 != "" && (p.s3.endpoint != "" || p.s3.credentialsFile != "") {
		return walconfig.Config{}, errors.New("-dev-s3 runs the store the s3 backend uses, with its own credentials: leave out -s3-endpoint and -s3-credentials-file")
	}
	withKafka := p.devKafka != "" || p.kafka != ""
	withS3 := p.devS3 != "" || p.s3.bucket != ""
	def := p.defaultBackend
	switch {
	case def == "" && withKafka && withS3:
		return walconfig.Config{}, errors.New("both kafka and s3 are configured: name the backend new channels begin on with -default kafka, s3 or local")
	case def == "" && withKafka:
		def = "kafka"
	case def == "" && withS3:
		def = "s3"
	case def == "" || def == "local":
		def = "local"
	case def == "kafka" && !withKafka:
		return walconfig.Config{}, errors.New("-default kafka: the kafka backend is not configured: give -kafka or -dev-kafka (or -config)")
	case def == "s3" && !withS3:
		return walconfig.Config{}, errors.New("-default s3: the s3 backend is not configured: give -s3-bucket or -dev-s3 (or -config)")
	case def != "kafka" && def != "s3":
		return walconfig.Config{}, errors.Newf("-default %q: not a backend walnode configures from flags (kafka, s3, local; or give -config)", def)
	}
	local := filepath.Join(p.data, "wal")
	if !withKafka && !withS3 {
		return walconfig.Parse(fmt.Appendf(nil, "backend: local\nlocal:\n  dir: %q\npool:\n  size: 4\n", local))
	}
	// The backends side by side: channels begin on the default and move
	// with walctl migrate. The pool is the same whichever is the default,
	// so that the default can change.
	var b strings.Builder
	b.WriteString("backends:\n")
	if withKafka {
		brokers := splitList(p.kafka)
		if len(brokers) == 0 {
			brokers = []string{p.devKafka}
		}
		// A short metadata age: topic creation waits on refreshed
		// metadata.
		fmt.Fprintf(&b, "  kafka:\n    seedBrokers: [%s]\n    metadataMinAge: 100ms\n", strings.Join(brokers, ", "))
	}
	fmt.Fprintf(&b, "  local:\n    dir: %q\n", local)
	if withS3 {
		b.WriteString("  s3:\n")
		f := p.s3
		if p.devS3 != "" {
			f.endpoint, f.pathStyle = "http://"+p.devS3, true
			f.credentialsFile = devS3Credentials(p)
			if f.bucket == "" {
				f.bucket = s3dev.DefaultBucket
			}
		}
		for _, kv := range []struct{ key, value string }{
			{"endpoint", f.endpoint}, {"bucket", f.bucket}, {"prefix", f.prefix}, {"region", f.region}, {"credentialsFile", f.credentialsFile},
		} {
			if kv.value != "" {
				fmt.Fprintf(&b, "    %s: %q\n", kv.key, kv.value)
			}
		}
		if f.credentialsFile != "" {
			b.WriteString("    profile: default\n") // the file's, whatever $AWS_PROFILE says
		}
		fmt.Fprintf(&b, "    pathStyle: %t\n", f.pathStyle)
	}
	fmt.Fprintf(&b, "default: %s\npool:\n  size: 6\n  prefix: pch-\n", def)
	return walconfig.Parse([]byte(b.String()))
}

// devS3Credentials is where -dev-s3 writes the credentials of its store.
func devS3Credentials(p params) string { return filepath.Join(p.data, "dev-s3-credentials") }

// startDevS3 runs the in-memory S3-compatible store of -dev-s3 with its
// bucket, and writes its credentials where the s3 entry reads them (and
// other nodes may: -s3-credentials-file).
func startDevS3(p params) (*s3dev.Store, string, error) {
	if err := os.MkdirAll(p.data, 0o700); err != nil {
		return nil, "", errors.Wrap(err, "walnode: -data")
	}
	creds := devS3Credentials(p)
	if err := s3dev.WriteCredentials(creds); err != nil {
		return nil, "", errors.Wrap(err, "walnode: -dev-s3")
	}
	st, err := s3dev.Start(p.devS3, p.s3.bucket)
	if err != nil {
		return nil, "", errors.Wrap(err, "walnode: -dev-s3")
	}
	return st, creds, nil
}

// startDevKafka runs kfake on addr.
func startDevKafka(addr string) (*kfake.Cluster, error) {
	u, err := url.Parse("tcp://" + addr)
	if err != nil || u.Port() == "" {
		return nil, errors.Newf("walnode: -dev-kafka %q is not host:port", addr)
	}
	var port int
	if _, err := fmt.Sscan(u.Port(), &port); err != nil {
		return nil, errors.Newf("walnode: -dev-kafka %q: port", addr)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		return nil, errors.Wrap(err, "walnode: dev kafka")
	}
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
