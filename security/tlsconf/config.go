package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/errors"
)

// ErrInvalid marks every configuration or file Server and Client refuse.
var ErrInvalid = errors.New("tlsconf: invalid configuration")

// Config names the files of one side of TLS connections. The zero value
// is "no TLS" (Enabled is false).
type Config struct {
	// CertFile is the PEM certificate chain this side presents (leaf
	// first), KeyFile its PEM private key (PKCS #8, or EC / PKCS #1). A
	// server needs both; a client gives both to present a client
	// certificate (mutual TLS).
	CertFile string
	KeyFile  string
	// CAFile is a PEM bundle of the CAs that verify the peer's certificate
	// (a client verifies the server with it); empty uses the system's
	// roots.
	CAFile string
	// ClientCAFile, on a server, is a PEM bundle of the CAs client
	// certificates must chain to: set, the server requires and verifies a
	// client certificate on every connection (mutual TLS).
	ClientCAFile string
	// ClientCertOptional, with ClientCAFile, lets clients connect without
	// a certificate; a certificate one presents is still verified against
	// ClientCAFile. For servers that authenticate such clients otherwise
	// (a bearer token) and refuse what they do not authorize: without
	// that, it is no mutual TLS.
	ClientCertOptional bool
	// ServerName, on a client, is the name the server's certificate must
	// carry; empty is the host the client dials.
	ServerName string
	// Names says how each file was given, for errors: a flag ("-tls-cert")
	// or a configuration key. Empty names are the field's name.
	Names Names
	// Logger receives rotations and rotation failures; nil discards them.
	Logger *slog.Logger
}

// Names are the user-facing names of Config's files.
type Names struct {
	CertFile, KeyFile, CAFile, ClientCAFile string
}

func (n Names) withDefaults() Names {
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	return Names{CertFile: or(n.CertFile, "CertFile"), KeyFile: or(n.KeyFile, "KeyFile"),
		CAFile: or(n.CAFile, "CAFile"), ClientCAFile: or(n.ClientCAFile, "ClientCAFile")}
}

// Enabled reports whether any file is named: whether TLS is asked for.
func (c Config) Enabled() bool {
	return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" || c.ClientCAFile != ""
}

// Validate reports a Config whose shape no side can use: a certificate
// without its key or a key without its certificate.
func (c Config) Validate() error {
	n := c.Names.withDefaults()
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return errors.Wrapf(ErrInvalid, "%s %s is given without %s", n.CertFile, c.CertFile, n.KeyFile)
	case c.KeyFile != "" && c.CertFile == "":
		return errors.Wrapf(ErrInvalid, "%s %s is given without %s", n.KeyFile, c.KeyFile, n.CertFile)
	case c.ClientCertOptional && c.ClientCAFile == "":
		return errors.Wrapf(ErrInvalid, "optional client certificates without %s", n.ClientCAFile)
	}
	return nil
}

// FileError is a file Server or Client cannot use.
type FileError struct {
	// Name is how the file was given (Config.Names), File its path.
	Name, File string
	// Reason says what is wrong; it wraps the cause (fs.ErrNotExist, ...).
	Reason error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Name, e.File, e.Reason)
}

// Unwrap returns the reason.
func (e *FileError) Unwrap() error { return e.Reason }

// Is matches ErrInvalid.
func (e *FileError) Is(target error) bool { return target == ErrInvalid }

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// Server returns the configuration of a server: it presents CertFile
// (re-read when replaced), and with ClientCAFile requires a client
// certificate from those CAs. The Source reports rotation failures.
func (c Config) Server() (*tls.Config, *Source, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	n := c.Names.withDefaults()
	if c.CertFile == "" {
		return nil, nil, errors.Wrapf(ErrInvalid, "a server needs %s and %s", n.CertFile, n.KeyFile)
	}
	src := &Source{}
	kp, err := newKeyPair(c.CertFile, c.KeyFile, n, c.logger())
	if err != nil {
		return nil, nil, err
	}
	src.pair = kp
	base := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get(), nil },
	}
	if c.ClientCAFile != "" {
		ca, err := newCAPool(c.ClientCAFile, n.ClientCAFile, c.logger())
		if err != nil {
			return nil, nil, err
		}
		src.clientCA = ca
		base.ClientAuth = tls.RequireAndVerifyClientCert
		if c.ClientCertOptional {
			base.ClientAuth = tls.VerifyClientCertIfGiven
		}
		pool := ca.get()
		base.ClientCAs = pool
		perPool := &derived{pool: pool, cfg: base.Clone()}
		base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return perPool.forPool(ca.get()), nil
		}
	}
	return base, src, nil
}

// derived caches the server config of the current client CA pool.
type derived struct {
	mu   sync.Mutex
	pool *x509.CertPool
	cfg  *tls.Config
}

func (d *derived) forPool(p *x509.CertPool) *tls.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p != d.pool {
		cfg := d.cfg.Clone()
		cfg.ClientCAs = p
		d.pool, d.cfg = p, cfg
	}
	return d.cfg
}

// Client returns the configuration of a client: it verifies servers with
// CAFile (the system's roots when empty) and ServerName, and presents
// CertFile (re-read when replaced) when the server asks for a certificate.
func (c Config) Client() (*tls.Config, *Source, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	n := c.Names.withDefaults()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	src := &Source{}
	if c.CAFile != "" {
		ca, err := newCAPool(c.CAFile, n.CAFile, c.logger())
		if err != nil {
			return nil, nil, err
		}
		cfg.RootCAs = ca.get()
	}
	if c.CertFile != "" {
		kp, err := newKeyPair(c.CertFile, c.KeyFile, n, c.logger())
		if err != nil {
			return nil, nil, err
		}
		src.pair = kp
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get(), nil }
	}
	return cfg, src, nil
}

// Source is what a config built by Server or Client reads its files from.
type Source struct {
	pair     *keyPair
	clientCA *caPool
}

// Err is the error of the last attempt to read replaced files, nil when
// it succeeded (or nothing was replaced): the config meanwhile serves the
// last good certificate and CAs. It checks the files first, as a
// handshake would.
func (s *Source) Err() error {
	if s == nil {
		return nil
	}
	// errors.Join, not CombineErrors: the CA's error must not hide behind
	// the certificate's, in the text or from errors.Is.
	var errs []error
	if s.pair != nil {
		s.pair.get()
		errs = append(errs, s.pair.err())
	}
	if s.clientCA != nil {
		s.clientCA.get()
		errs = append(errs, s.clientCA.err())
	}
	return errors.Join(errs...)
}

// Certificate is the leaf certificate currently presented, nil without
// one.
func (s *Source) Certificate() *x509.Certificate {
	if s == nil || s.pair == nil {
		return nil
	}
	return s.pair.get().Leaf
}
