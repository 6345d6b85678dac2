package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
)

// files.go: reading PEM files, and reading them again when they change.

// stamp identifies one version of a file without reading it: replacing
// the file by a rename changes its identity, rewriting it in place its
// modification time or size.
type stamp struct {
	info os.FileInfo
}

func (s stamp) same(o stamp) bool {
	if s.info == nil || o.info == nil {
		return s.info == o.info
	}
	return os.SameFile(s.info, o.info) && s.info.Size() == o.info.Size() && s.info.ModTime().Equal(o.info.ModTime())
}

func stat(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	return stamp{info: fi}
}

// reloader holds the value last read from some files, and reads them
// again when their stamps change. Its mutex guards every field; get is
// called from handshakes of any goroutine.
type reloader[T any] struct {
	paths []string
	load  func() (T, error)
	what  string // for logs: "certificate", "client CA"
	log   *slog.Logger

	mu      sync.Mutex
	cur     T       // the last good value
	stamps  []stamp // of the files as last read (good or not)
	lastErr error   // of the last read; nil when it was good
}

// newReloader reads the files once; an error here is the caller's.
func newReloader[T any](what string, paths []string, load func() (T, error), log *slog.Logger) (*reloader[T], error) {
	r := &reloader[T]{paths: paths, load: load, what: what, log: log}
	r.stamps = r.stat()
	v, err := load()
	if err != nil {
		return nil, err
	}
	r.cur = v
	return r, nil
}

func (r *reloader[T]) stat() []stamp {
	s := make([]stamp, len(r.paths))
	for i, p := range r.paths {
		s[i] = stat(p)
	}
	return s
}

// get returns the current value, after reading the files again if they
// changed since they were last read. A failed read keeps the last good
// value and is logged once (until the files change again).
func (r *reloader[T]) get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.stat() // before reading: a change after this is seen next time
	changed := false
	for i := range now {
		if !now[i].same(r.stamps[i]) {
			changed = true
		}
	}
	if !changed {
		return r.cur
	}
	r.stamps = now
	v, err := r.load()
	if err != nil {
		r.lastErr = err
		r.log.Error("tls: replaced files are unusable; still using the last good "+r.what, "error", err.Error())
		return r.cur
	}
	r.cur, r.lastErr = v, nil
	r.log.Info("tls: "+r.what+" reloaded", "files", r.paths)
	return r.cur
}

func (r *reloader[T]) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// keyPair is a certificate and key read from their files.
type keyPair = reloader[*tls.Certificate]

func newKeyPair(certFile, keyFile string, n Names, log *slog.Logger) (*keyPair, error) {
	return newReloader("certificate", []string{certFile, keyFile}, func() (*tls.Certificate, error) {
		return loadKeyPair(certFile, keyFile, n, time.Now())
	}, log)
}

// loadKeyPair reads and checks a certificate and its key, naming the file
// at fault.
func loadKeyPair(certFile, keyFile string, n Names, now time.Time) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, &FileError{Name: n.CertFile, File: certFile, Reason: errors.Wrap(err, "cannot read the certificate")}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, &FileError{Name: n.KeyFile, File: keyFile, Reason: errors.Wrap(err, "cannot read the key")}
	}
	if !hasBlock(certPEM, func(t string) bool { return t == "CERTIFICATE" }) {
		return nil, &FileError{Name: n.CertFile, File: certFile, Reason: errors.New("holds no PEM certificate")}
	}
	if !hasBlock(keyPEM, func(t string) bool { return strings.HasSuffix(t, "PRIVATE KEY") }) {
		return nil, &FileError{Name: n.KeyFile, File: keyFile, Reason: errors.New("holds no PEM private key")}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The PEM blocks are there: the key does not parse, or does not
		// match the certificate's public key.
		return nil, &FileError{Name: n.KeyFile, File: keyFile,
			Reason: errors.Wrapf(err, "not the key of the certificate %s %s", n.CertFile, certFile)}
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, &FileError{Name: n.CertFile, File: certFile, Reason: errors.Wrap(err, "parse certificate")}
		}
		pair.Leaf = leaf
	}
	if now.After(leaf.NotAfter) {
		return nil, &FileError{Name: n.CertFile, File: certFile,
			Reason: errors.Newf("the certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))}
	}
	return &pair, nil
}

func hasBlock(data []byte, ok func(typ string) bool) bool {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return false
		}
		if ok(b.Type) {
			return true
		}
	}
}

// caPool is a CA bundle read from its file.
type caPool = reloader[*x509.CertPool]

func newCAPool(file, name string, log *slog.Logger) (*caPool, error) {
	return newReloader("CA bundle", []string{file}, func() (*x509.CertPool, error) {
		return loadCAPool(file, name)
	}, log)
}

func loadCAPool(file, name string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &FileError{Name: name, File: file, Reason: errors.Wrap(err, "cannot read the CA bundle")}
	}
	pool := x509.NewCertPool()
	n := 0
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, &FileError{Name: name, File: file, Reason: errors.Wrapf(err, "certificate %d", n+1)}
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, &FileError{Name: name, File: file, Reason: errors.New("holds no PEM certificate")}
	}
	return pool, nil
}
