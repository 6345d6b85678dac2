package pulsar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/cockroachdb/errors"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Wire facts of the Pulsar binary protocol used by the probe: a frame is
// [total size u32 BE][command size u32 BE][BaseCommand], total = 4 +
// command size. BaseCommand.type CONNECT = 2, CONNECTED = 3, ERROR = 14.
const (
	probeConnect         = 2
	probeConnected       = 3
	probeError           = 14
	probeProtocolVersion = 20
	probeMaxFrame        = 1 << 20
)

// probeMaxMessageSize opens one connection to the service URL, sends
// CONNECT and returns the max_message_size of the broker's CONNECTED
// answer (Pulsar's default when the broker announces none). The client
// does not expose what its connections learned, so the backend asks once
// itself. The protocol messages are built at run time from the descriptors
// pulsar-client-go registers in the global protobuf registry (package
// pulsar.proto); nothing of PulsarApi.proto is copied.
func probeMaxMessageSize(ctx context.Context, cfg *Config) (int, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName("pulsar.proto.BaseCommand")
	if err != nil {
		return 0, errors.Wrap(err, "pulsar: protocol descriptors not registered")
	}
	u, err := url.Parse(cfg.ServiceURL)
	if err != nil {
		return 0, err
	}
	host := strings.Split(u.Host, ",")[0]
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectionTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return 0, errors.Wrapf(err, "pulsar: connect to %s", host)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if u.Scheme == "pulsar+ssl" {
		tc, err := cfg.tlsConfig(host)
		if err != nil {
			return 0, err
		}
		tconn := tls.Client(conn, tc)
		if err := tconn.HandshakeContext(ctx); err != nil {
			return 0, errors.Wrapf(err, "pulsar: tls handshake with %s", host)
		}
		conn = tconn
	}

	cmd := mt.New()
	fields := cmd.Descriptor().Fields()
	cmd.Set(fields.ByName("type"), protoreflect.ValueOfEnum(probeConnect))
	connect := cmd.Mutable(fields.ByName("connect")).Message()
	cf := connect.Descriptor().Fields()
	connect.Set(cf.ByName("client_version"), protoreflect.ValueOfString("streamwal"))
	connect.Set(cf.ByName("protocol_version"), protoreflect.ValueOfInt32(probeProtocolVersion))
	if cfg.AuthToken != "" {
		connect.Set(cf.ByName("auth_method_name"), protoreflect.ValueOfString("token"))
		connect.Set(cf.ByName("auth_data"), protoreflect.ValueOfBytes([]byte(cfg.AuthToken)))
	}
	body, err := proto.Marshal(cmd.Interface())
	if err != nil {
		return 0, errors.Wrap(err, "pulsar: encode CONNECT")
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(body)))
	if _, err := conn.Write(append(frame, body...)); err != nil {
		return 0, errors.Wrap(err, "pulsar: send CONNECT")
	}
	var head [8]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return 0, errors.Wrap(err, "pulsar: read CONNECTED")
	}
	total, size := binary.BigEndian.Uint32(head[:4]), binary.BigEndian.Uint32(head[4:])
	if size > probeMaxFrame || total < 4+size {
		return 0, errors.Newf("pulsar: bad frame of %d bytes from %s", total, host)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return 0, errors.Wrap(err, "pulsar: read CONNECTED")
	}
	resp := mt.New()
	if err := proto.Unmarshal(buf, resp.Interface()); err != nil {
		return 0, errors.Wrap(err, "pulsar: decode CONNECTED")
	}
	switch typ := resp.Get(fields.ByName("type")).Enum(); typ {
	case probeConnected:
		connected := resp.Get(fields.ByName("connected")).Message()
		fd := connected.Descriptor().Fields().ByName("max_message_size")
		if !connected.Has(fd) || connected.Get(fd).Int() <= 0 {
			return defaultBrokerMaxMessage, nil
		}
		return int(connected.Get(fd).Int()), nil
	case probeError:
		e := resp.Get(fields.ByName("error")).Message()
		return 0, errors.Newf("pulsar: CONNECT refused: %s", e.Get(e.Descriptor().Fields().ByName("message")).String())
	default:
		return 0, errors.Newf("pulsar: unexpected answer %d to CONNECT", typ)
	}
}

// tlsConfig builds the TLS configuration the probe uses, from the same
// settings the client gets.
func (c *Config) tlsConfig(host string) (*tls.Config, error) {
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		name = host
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: name}
	if c.TLS.AllowInsecureConnection || !c.TLS.ValidateHostname {
		// The client verifies the chain but not the host name unless
		// ValidateHostname is set; InsecureSkipVerify plus a chain check
		// below does the same.
		tc.InsecureSkipVerify = true //nolint:gosec // mirrors the client's settings
	}
	if c.TLS.TrustCertsFile != "" {
		pem, err := os.ReadFile(c.TLS.TrustCertsFile)
		if err != nil {
			return nil, invalid("tls trust certs file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, invalid("tls trust certs file %q holds no PEM certificate", c.TLS.TrustCertsFile)
		}
		tc.RootCAs = pool
	}
	if tc.InsecureSkipVerify && !c.TLS.AllowInsecureConnection {
		roots := tc.RootCAs
		tc.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs := make([]*x509.Certificate, 0, len(raw))
			for _, r := range raw {
				cert, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				certs = append(certs, cert)
			}
			if len(certs) == 0 {
				return errors.New("pulsar: broker sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, cert := range certs[1:] {
				inter.AddCert(cert)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return tc, nil
}
