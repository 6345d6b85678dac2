package s3test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

// The reader of the object format in scripts/s3read.py, run on objects a
// client no one here wrote (the aws CLI) lists and fetches: that the
// format doc.go documents is what is in the bucket, and enough to decode
// it. Needs python3 and the aws CLI (Debian's awscli: .ci/run installs it).
//
// Here the objects are encoded by encodeObject from the doc's format; the
// same check on objects the backend itself wrote is in
// s3read_backend_test.go.

// record is one message as an object holds it.
type record struct {
	props   [][2]string
	payload []byte
}

// object is one flush or fence as doc.go ("An object") lays it out.
type object struct {
	kind               byte // 1 data, 2 fence
	epoch, slot        uint64
	term               int64
	nonce              [16]byte
	records            []record
	channel, keyPrefix string
}

func (o object) key() string {
	return fmt.Sprintf("%s%s/e%020d/%020d", o.keyPrefix, o.channel, o.epoch, o.slot)
}

// encodeObject lays o out as doc.go says, from the doc alone.
func encodeObject(o object) []byte {
	b := []byte("SWL1")
	b = append(b, o.kind, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, o.epoch)
	b = binary.BigEndian.AppendUint64(b, uint64(o.term))
	b = binary.BigEndian.AppendUint64(b, o.slot)
	b = binary.BigEndian.AppendUint32(b, uint32(len(o.records)))
	b = append(b, o.nonce[:]...)
	for _, r := range o.records {
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.props)))
		for _, p := range r.props {
			b = binary.BigEndian.AppendUint16(b, uint16(len(p[0])))
			b = append(b, p[0]...)
			b = binary.BigEndian.AppendUint32(b, uint32(len(p[1])))
			b = append(b, p[1]...)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.payload)))
		b = append(b, r.payload...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// decoded is one object as s3read.py --json prints it.
type decoded struct {
	Kind    string `json:"kind"`
	Epoch   uint64 `json:"epoch"`
	Term    int64  `json:"term"`
	Slot    uint64 `json:"slot"`
	Count   int    `json:"count"`
	Nonce   string `json:"nonce"`
	Key     string `json:"key"`
	Records []struct {
		Properties [][2]string `json:"properties"`
		Payload    string      `json:"payload"`
	} `json:"records"`
}

// awsCLI runs Debian's aws CLI (or $STREAMWAL_AWSCLI, or the aws on PATH)
// against s, with credentials and configuration of the test's own.
type awsCLI struct {
	bin string
	env []string
	s   *Store
}

func newAWSCLI(t *testing.T, s *Store) *awsCLI {
	t.Helper()
	bin := os.Getenv("STREAMWAL_AWSCLI")
	if bin == "" {
		bin = "/usr/bin/aws" // Debian's awscli
		if _, err := os.Stat(bin); err != nil {
			if bin, err = exec.LookPath("aws"); err != nil {
				t.Fatalf("no aws CLI: install Debian's (apt-get install awscli; .ci/run does) or set $STREAMWAL_AWSCLI")
			}
		}
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "config")
	if err := os.WriteFile(config, []byte("[default]\ns3 =\n    addressing_style = path\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey, "AWS_DEFAULT_REGION="+s.Region,
		"AWS_CONFIG_FILE="+config, "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "none"),
		"AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=", "HOME="+dir)
	return &awsCLI{bin: bin, env: env, s: s}
}

func (a *awsCLI) run(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(a.bin, append([]string{"--endpoint-url", a.s.Endpoint, "--output", "json"}, args...)...)
	cmd.Env = a.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", a.bin, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// fetchAndDecode fetches the channel's objects under prefix with the aws
// CLI (one "s3 cp --recursive": a run of the CLI costs about a second of
// start-up, so not one per object), decodes every slot (data and fences,
// not the manifest or hints) with one run of s3read.py, and checks the user
// metadata of the first object of each kind against its header (the
// backend writes each kind's metadata in one place).
func fetchAndDecode(t *testing.T, a *awsCLI, prefix string) map[string]decoded {
	t.Helper()
	dir := t.TempDir()
	a.run(t, "s3", "cp", "--recursive", "--only-show-errors", "s3://"+a.s.Bucket+"/"+prefix, dir)
	slot := regexp.MustCompile(`/e\d{20}/\d{20}$`)
	var files, keys []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if key := prefix + filepath.ToSlash(rel); slot.MatchString(key) {
			files, keys = append(files, path), append(keys, key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]decoded{}
	if len(files) == 0 {
		return got
	}
	for _, d := range s3readAll(t, files, keys) {
		got[d.Key] = d
	}
	checked := map[string]bool{}
	for _, key := range keys { // WalkDir's lexical order: the log's
		d := got[key]
		if checked[d.Kind] {
			continue
		}
		checked[d.Kind] = true
		var head struct{ Metadata map[string]string }
		if err := json.Unmarshal(a.run(t, "s3api", "head-object", "--bucket", a.s.Bucket, "--key", key), &head); err != nil {
			t.Fatal(err)
		}
		// Header names are case-insensitive; gofakes3 gives them
		// capitalised, and the CLI passes them on as they came.
		meta := map[string]string{}
		for k, v := range head.Metadata {
			meta[strings.ToLower(k)] = v
		}
		if meta["streamwal-kind"] != d.Kind || meta["streamwal-term"] != strconv.FormatInt(d.Term, 10) ||
			meta["streamwal-count"] != strconv.Itoa(d.Count) || meta["streamwal-nonce"] != d.Nonce {
			t.Errorf("%s: metadata %v does not match the header (kind %s, term %d, count %d, nonce %s)",
				key, head.Metadata, d.Kind, d.Term, d.Count, d.Nonce)
		}
	}
	return got
}

// s3readAll decodes files, the objects at keys, with one run of
// scripts/s3read.py.
func s3readAll(t *testing.T, files, keys []string) []decoded {
	t.Helper()
	args := []string{"--json"}
	for _, k := range keys {
		args = append(args, "--key", k)
	}
	out, stderr, err := runS3read(append(args, files...)...)
	if err != nil {
		t.Fatalf("s3read.py: %v\n%s", err, stderr)
	}
	var all []decoded
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var d decoded
		if err := json.Unmarshal(line, &d); err != nil {
			t.Fatalf("s3read.py printed %q: %v", line, err)
		}
		all = append(all, d)
	}
	if len(all) != len(files) {
		t.Fatalf("s3read.py decoded %d objects of %d", len(all), len(files))
	}
	return all
}

// s3read decodes file, the object at key, with scripts/s3read.py.
func s3read(t *testing.T, file, key string) decoded {
	t.Helper()
	out, stderr, err := runS3read("--json", "--key", key, file)
	if err != nil {
		t.Fatalf("s3read.py %s: %v\n%s", key, err, stderr)
	}
	var d decoded
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("s3read.py %s printed %q: %v", key, out, err)
	}
	return d
}

func runS3read(args ...string) (stdout []byte, stderr string, err error) {
	python, err := exec.LookPath("python3")
	if err != nil {
		return nil, "", fmt.Errorf("no python3: %w", err)
	}
	cmd := exec.Command(python, append([]string{filepath.Join("..", "..", "scripts", "s3read.py")}, args...)...)
	var e bytes.Buffer
	cmd.Stderr = &e
	stdout, err = cmd.Output()
	return stdout, e.String(), err
}

// sameRecords reports how d's records differ from want ("" for not at all):
// payloads byte for byte, properties in order.
func sameRecords(d decoded, want []record) string {
	if len(d.Records) != len(want) || d.Count != len(want) {
		return fmt.Sprintf("%d records (count %d), want %d", len(d.Records), d.Count, len(want))
	}
	for i, r := range d.Records {
		p, err := decodeBase64(r.Payload)
		if err != nil || !bytes.Equal(p, want[i].payload) {
			return fmt.Sprintf("record %d: payload of %d bytes (%v) differs from the %d appended", i, len(p), err, len(want[i].payload))
		}
		if fmt.Sprint(r.Properties) != fmt.Sprint(want[i].props) && !(len(r.Properties) == 0 && len(want[i].props) == 0) {
			return fmt.Sprintf("record %d: properties %q, want %q", i, r.Properties, want[i].props)
		}
	}
	return ""
}

func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestS3ReadEncoded: objects laid out from doc.go, put in each store with
// their metadata, come back through the aws CLI and s3read.py with every
// header field, property and payload byte as written; a damaged one is
// refused, naming what is wrong.
func TestS3ReadEncoded(t *testing.T) {
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			ctx := testCtx(t)
			c := s.Client(t)
			const prefix, channel = "interop/", "orders.v1"
			var nonce [16]byte
			copy(nonce[:], randomBytes(t, 16))
			objs := []object{
				{kind: 1, epoch: 1, slot: 0, term: 3, records: []record{
					{props: [][2]string{{"_k", "1"}, {"_t", "3"}, {"_tt", "424242"}, {"user", "value"}}, payload: []byte("first")},
					{props: nil, payload: nil},
					{props: [][2]string{{"ключ", "значение ✓"}}, payload: allBytes},
				}},
				{kind: 1, epoch: 1, slot: 1, term: 3, records: []record{{props: [][2]string{{"_k", "0"}}, payload: randomBytes(t, 64<<10)}}},
				{kind: 2, epoch: 1, slot: 2, term: 4}, // the fence of epoch 1 by the open at term 4
				{kind: 1, epoch: 2, slot: 0, term: 4, records: []record{{payload: []byte("after the fence")}}},
			}
			for i := range objs {
				objs[i].channel, objs[i].keyPrefix, objs[i].nonce = channel, prefix, nonce
				objs[i].nonce[0] = byte(i)
				o := objs[i]
				kind := map[byte]string{1: "data", 2: "fence"}[o.kind]
				if _, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(o.key()),
					Body: bytes.NewReader(encodeObject(o)), IfNoneMatch: aws.String("*"),
					Metadata: map[string]string{"streamwal-kind": kind, "streamwal-term": strconv.FormatInt(o.term, 10),
						"streamwal-count": strconv.Itoa(len(o.records)), "streamwal-nonce": hex.EncodeToString(o.nonce[:])},
				}); err != nil {
					t.Fatal(err)
				}
			}
			// What else a channel holds, which the listing shows and the
			// reader leaves alone.
			for key, body := range map[string]string{
				prefix + channel + "/manifest":                              `{"v":1,"channel":"orders.v1","term":4,"nextEpoch":3}`,
				prefix + channel + "/e00000000000000000001/hint":            "1",
				prefix + "other/e00000000000000000001/00000000000000000000": "not this channel",
			} {
				if _, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), Body: strings.NewReader(body)}); err != nil {
					t.Fatal(err)
				}
			}

			got := fetchAndDecode(t, newAWSCLI(t, s), prefix+channel+"/")
			if len(got) != len(objs) {
				t.Fatalf("decoded %d objects, want %d", len(got), len(objs))
			}
			for _, o := range objs {
				d, ok := got[o.key()]
				if !ok {
					t.Fatalf("%s not listed", o.key())
				}
				if want := map[byte]string{1: "data", 2: "fence"}[o.kind]; d.Kind != want || d.Epoch != o.epoch || d.Slot != o.slot ||
					d.Term != o.term || d.Nonce != hex.EncodeToString(o.nonce[:]) || d.Key != o.key() {
					t.Errorf("%s: header kind %s epoch %d slot %d term %d nonce %s key %s", o.key(), d.Kind, d.Epoch, d.Slot, d.Term, d.Nonce, d.Key)
				}
				if diff := sameRecords(d, o.records); diff != "" {
					t.Errorf("%s: %s", o.key(), diff)
				}
			}
		})
	}
}

// TestS3ReadRefuses: s3read.py fails, naming the key and the damage, on an
// object whose bytes or key do not match its header.
func TestS3ReadRefuses(t *testing.T) {
	o := object{kind: 1, epoch: 7, slot: 9, term: 2, channel: "ch", keyPrefix: "p/",
		records: []record{{props: [][2]string{{"a", "b"}}, payload: []byte("payload")}}}
	good := encodeObject(o)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, key, want string
		data            []byte
	}{
		{"flipped payload byte", o.key(), "CRC-32C", func() []byte {
			b := bytes.Clone(good)
			b[len(b)-6] ^= 1
			return b
		}()},
		{"bad magic", o.key(), "bad magic", append([]byte("SWL2"), good[4:]...)},
		{"truncated", o.key(), "CRC-32C", good[:len(good)-3]},
		{"another slot's key", "p/ch/e00000000000000000007/00000000000000000010", "slot 10", good},
		{"count beyond the records", o.key(), "header says 2 records", func() []byte {
			b := bytes.Clone(good[:len(good)-4])
			binary.BigEndian.PutUint32(b[32:36], 2)
			return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(file, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			out, stderr, err := runS3read("--json", "--key", tc.key, file)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || len(out) != 0 {
				t.Fatalf("s3read.py: %v, printed %q, want exit status 1 and nothing printed", err, out)
			}
			if !strings.Contains(stderr, tc.key) || !strings.Contains(stderr, tc.want) {
				t.Fatalf("s3read.py said %q, want the key and %q", stderr, tc.want)
			}
		})
	}
	// And the good one decodes.
	file := filepath.Join(dir, "good")
	if err := os.WriteFile(file, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if diff := sameRecords(s3read(t, file, o.key()), o.records); diff != "" {
		t.Fatal(diff)
	}
}
