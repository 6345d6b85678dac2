package walconfig_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/s3test"
	"github.com/streamwal/streamwal/walconfig"
	"github.com/streamwal/streamwal/walimpls"
)

// credentialsFile writes a shared-credentials file of st's keys.
func credentialsFile(t *testing.T, st *s3test.Store) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		st.AccessKey, st.SecretKey), 0o600))
	return path
}

// Two s3 entries on one bucket, under two prefixes, beside a local one:
// each is built (the store proven to fence), described by where its data
// is with the defaults applied and never its credentials, served to a
// chain that recorded it, and works.
func TestS3Entries(t *testing.T) {
	ctx := testCtx(t)
	st := s3test.Fake(t)
	creds := credentialsFile(t, st)
	path := writeConfig(t, fmt.Sprintf(`backends:
  local:
    dir: %s
  s3:
    endpoint: %s/
    bucket: %s
    pathStyle: true
    credentialsFile: %s
    profile: default
    flushInterval: 5ms
    pollInterval: 10ms
  s3-other:
    kind: s3
    endpoint: %s
    bucket: %s
    prefix: other/
    region: eu-west-1
    pathStyle: true
    credentialsFile: %s
    profile: default
default: s3
`, t.TempDir(), st.Endpoint, st.Bucket, creds, st.Endpoint, st.Bucket, creds))
	cfg, err := walconfig.Load(path)
	require.NoError(t, err)
	require.Equal(t, "s3", cfg.Default())
	reg := prometheus.NewRegistry()
	bs, err := walconfig.BuildAll(ctx, cfg, walconfig.Deps{Registerer: reg})
	require.NoError(t, err)
	defer func() { require.NoError(t, bs.Close()) }()
	require.Equal(t, []string{"local", "s3", "s3-other"}, bs.Names())

	for name, want := range map[string]string{
		"s3":       fmt.Sprintf(`{"endpoint":%q,"bucket":%q,"prefix":"streamwal/","region":"us-east-1","pathStyle":true}`, st.Endpoint, st.Bucket),
		"s3-other": fmt.Sprintf(`{"endpoint":%q,"bucket":%q,"prefix":"other/","region":"eu-west-1","pathStyle":true}`, st.Endpoint, st.Bucket),
	} {
		d, err := bs.Describe(name)
		require.NoError(t, err)
		require.Equal(t, "s3", d.Kind)
		require.Equal(t, want, string(d.Params), name)
		for _, secret := range []string{st.SecretKey, creds} {
			require.NotContains(t, string(d.Params), secret)
		}
		d.Channel = "orders-s1"
		require.NoError(t, d.Validate())
		o, err := bs.Opener(d)
		require.NoError(t, err, name)
		b, _ := bs.Entry(name)
		require.Same(t, b, o)
		require.NotNil(t, b.S3, "the s3 Opener is the entry's S3")
	}

	// The default entry works, on its prefix of the bucket.
	b, _ := bs.Entry("s3")
	w, err := b.Open(ctx, walimpls.Channel{Name: "orders", Term: 1})
	require.NoError(t, err)
	_, err = walimpls.Append(ctx, w, testMessage(t, "x"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	out, err := st.Client(t).ListObjectsV2(ctx, listInput(st.Bucket, "streamwal/orders/"))
	require.NoError(t, err)
	require.NotEmpty(t, out.Contents, "the channel's objects are under the entry's prefix")
	out, err = st.Client(t).ListObjectsV2(ctx, listInput(st.Bucket, "other/orders/"))
	require.NoError(t, err)
	require.Empty(t, out.Contents)

	// Each entry's series carry its name.
	families, err := reg.Gather()
	require.NoError(t, err)
	labelled := map[string]bool{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "streamwal_s3_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "backend" {
					labelled[l.GetValue()] = true
				}
			}
		}
	}
	require.Equal(t, map[string]bool{"s3": true, "s3-other": true}, labelled)
}

// What s3.Config.Validate refuses, and an endpoint with credentials in
// it, stop BuildAll (and Build) before anything is built or dialled, at
// the line of the offending key, without repeating a secret.
func TestS3EntryRefusals(t *testing.T) {
	ctx := testCtx(t)
	for _, c := range []struct {
		name string
		yaml string
		want problem
	}{{
		name: "no bucket",
		yaml: "backends:\n  s3:\n    endpoint: http://127.0.0.1:1\n    pathStyle: true\n",
		want: problem{3, "backends.s3", "s3: bucket is required"},
	}, {
		name: "no settings at all",
		yaml: "backends:\n  local: {dir: %DIR%}\n  s3:\ndefault: local\n",
		want: problem{3, "backends.s3", "s3: bucket is required"},
	}, {
		name: "a prefix without its slash",
		yaml: "backends:\n  s3:\n    bucket: b\n    prefix: wal\n",
		want: problem{4, "backends.s3.prefix", `s3: prefix "wal" must end with /`},
	}, {
		name: "an endpoint that is no URL of http",
		yaml: "backends:\n  w:\n    kind: s3\n    bucket: b\n    endpoint: 127.0.0.1:9000\n",
		want: problem{5, "backends.w.endpoint", "s3: endpoint is not an http:// or https:// URL with a host"},
	}, {
		name: "an endpoint with credentials",
		yaml: "backends:\n  s3:\n    bucket: b\n    endpoint: http://AKIAEXAMPLE:s3cr3t@127.0.0.1:9000\n",
		want: problem{4, "backends.s3.endpoint", "s3: endpoint holds user information: give credentials in credentialsFile or the AWS environment, never in the URL"},
	}, {
		name: "a negative interval",
		yaml: "backends:\n  s3:\n    bucket: b\n    flushInterval: -1s\n",
		want: problem{4, "backends.s3.flushInterval", "s3: negative flushInterval"},
	}, {
		name: "a probe that proves nothing",
		yaml: "backends:\n  s3:\n    bucket: b\n    probeRacers: 1\n",
		want: problem{4, "backends.s3.probeRacers", "s3: probeRacers 1 proves nothing"},
	}, {
		name: "a single-backend file",
		yaml: "backend: s3\ns3:\n  endpoint: http://AKIAEXAMPLE:s3cr3t@127.0.0.1:9000\n  bucket: b\n",
		want: problem{3, "s3.endpoint", "s3: endpoint holds user information"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, strings.ReplaceAll(c.yaml, "%DIR%", t.TempDir()))
			cfg, err := walconfig.Load(path)
			require.NoError(t, err, "Parse checks keys and types; values are the backend's")
			bs, err := walconfig.BuildAll(ctx, cfg, walconfig.Deps{})
			require.Nil(t, bs)
			requireProblems(t, err, path, c.want)
			require.NotContains(t, err.Error(), "s3cr3t")
			require.NotContains(t, err.Error(), "AKIAEXAMPLE")
			if cfg.Default() == "local" {
				return
			}
			b, err := walconfig.Build(ctx, cfg, walconfig.Deps{})
			require.Nil(t, b)
			requireProblems(t, err, path, c.want)
			require.NotContains(t, err.Error(), "s3cr3t")
		})
	}

	// Misspelt keys of an s3 entry are found by Parse, like any kind's.
	_, err := walconfig.Parse([]byte("backends:\n  s3:\n    bucket: b\n    pathstyle: true\n    flushIntervall: 5ms\n"))
	requireProblems(t, err, "",
		problem{4, "backends.s3.pathstyle", `unknown key (did you mean "pathStyle"?)`},
		problem{5, "backends.s3.flushIntervall", `unknown key (did you mean "flushInterval"?)`})
	_, err = walconfig.Parse([]byte("backend: s3\ns3:\n  bucket: b\n  credentials: x\n"))
	requireProblems(t, err, "", problem{4, "s3.credentials", "unknown key"})

	// Two entries on one bucket and prefix (the default prefix written
	// out, the endpoint with a slash more) are one place.
	path := writeConfig(t, "backends:\n  a: {kind: s3, endpoint: http://h:1, bucket: b}\n  b: {kind: s3, endpoint: http://h:1/, bucket: b, prefix: streamwal/}\ndefault: a\n")
	cfg, err := walconfig.Load(path)
	require.NoError(t, err)
	_, err = walconfig.BuildAll(ctx, cfg, walconfig.Deps{})
	requireProblems(t, err, path, problem{3, "backends.b", `locates the same data as entry "a"`})
}

func listInput(bucket, prefix string) *awss3.ListObjectsV2Input {
	return &awss3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)}
}

// The README's example of an s3 entry is a valid file.
func TestS3ReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	const start = "```yaml\nbackends:\n  local:\n    dir: ./streamwal-data\n  s3:\n"
	i := strings.Index(string(readme), start)
	require.GreaterOrEqual(t, i, 0, "the README's s3 example")
	block := string(readme[i+len("```yaml\n"):])
	block = block[:strings.Index(block, "```")]
	cfg, err := walconfig.Parse([]byte(block))
	require.NoError(t, err)
	require.Equal(t, "local", cfg.Default())
}
