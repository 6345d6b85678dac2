// Package certs makes the certificates of a streamwal cluster: a CA, node
// certificates (server and client use, with the nodes' DNS names and IPs)
// and client certificates (client use, the principal as subject common
// name), as PEM files. walctl certs is its command line; tests use it to
// make certificates of every kind a handshake must refuse (expired, for
// another name, from another CA).
//
// Keys are ECDSA P-256 (the default) or Ed25519, made with crypto/rand by
// the standard library; nothing here is home-made cryptography. Private keys
// are written as PKCS #8 with mode 0600, and no file is overwritten unless
// the caller says so.
//
// # Identities
//
// A certificate says what it is for, not only whom it names: a node's
// carries the URI SAN streamwal://node/<name> and both server and client
// use; a client's carries streamwal://client/<principal> and client use
// only. Identify reads them, so that a client certificate whose name
// happens to be a node's (or root) is still a client's: nodes are told
// apart by the URI, never by a name. A certificate without such a URI (made
// by another CA's tools) is a client named by its common name; it is never
// a node.
//
// Files in a directory, as walctl certs writes them:
//
//	ca.crt, ca.key                  the CA (keep ca.key off the nodes)
//	node.<name>.crt, .key           a node: server and client use
//	client.<principal>.crt, .key    a client: client use only
package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrExists is a file a write would overwrite without Overwrite.
var ErrExists = errors.New("certs: file exists")

// KeyType is the kind of key a certificate is made for.
type KeyType string

// Key types.
const (
	ECDSAP256 KeyType = "ecdsa-p256"
	Ed25519   KeyType = "ed25519"
)

// Default validities.
const (
	DefaultCAValidity   = 5 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour
)

// Kind is what a leaf certificate is for.
type Kind uint8

// Kinds.
const (
	// Node certificates serve the API and also dial other nodes (the
	// coordinator's liveness streams), so they carry both uses.
	Node Kind = iota + 1
	// Client certificates only authenticate clients.
	Client
)

// Request describes a certificate to make. Zero fields take defaults:
// ECDSA P-256, NotBefore a minute before now (clock skew), the default
// validity of its kind.
type Request struct {
	// CommonName is the subject's common name: the node's name or the
	// client's principal. Required.
	CommonName string
	// DNSNames and IPs are the subject alternative names a node is reached
	// by; a node needs at least one.
	DNSNames []string
	IPs      []net.IP
	// Kind is Node or Client (ignored by NewCA).
	Kind     Kind
	KeyType  KeyType
	Validity time.Duration
	// NotBefore is the start of the validity; zero is now minus a minute.
	NotBefore time.Time
}

// Pair is a certificate and its private key, in PEM.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// Authority is a CA that issues certificates.
type Authority struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	Pair Pair
}

// NewCA makes a self-signed CA.
func NewCA(req Request) (*Authority, error) {
	if req.CommonName == "" {
		req.CommonName = "streamwal CA"
	}
	if req.Validity == 0 {
		req.Validity = DefaultCAValidity
	}
	key, err := newKey(req.KeyType)
	if err != nil {
		return nil, err
	}
	tmpl, err := template(req)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.MaxPathLenZero = true, true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, errors.Wrap(err, "certs: create CA")
	}
	return authority(der, key)
}

// LoadCA reads a CA from its certificate and key files.
func LoadCA(certFile, keyFile string) (*Authority, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, errors.Wrap(err, "certs: CA certificate")
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, errors.Wrap(err, "certs: CA key")
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.Newf("certs: %s holds no PEM certificate", certFile)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, errors.Wrapf(err, "certs: %s", keyFile)
	}
	a, err := authority(block.Bytes, key)
	if err != nil {
		return nil, errors.Wrapf(err, "certs: %s", certFile)
	}
	if !a.Cert.IsCA {
		return nil, errors.Newf("certs: %s is not a CA certificate", certFile)
	}
	if !publicKeyEqual(a.Cert.PublicKey, key.Public()) {
		return nil, errors.Newf("certs: %s does not match the certificate %s", keyFile, certFile)
	}
	return a, nil
}

func authority(der []byte, key crypto.Signer) (*Authority, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, errors.Wrap(err, "certs: parse certificate")
	}
	keyPEM, err := marshalKey(key)
	if err != nil {
		return nil, err
	}
	return &Authority{Cert: cert, Key: key, Pair: Pair{CertPEM: certPEM(der), KeyPEM: keyPEM}}, nil
}

// Issue makes a leaf certificate signed by a.
func (a *Authority) Issue(req Request) (Pair, error) {
	if req.CommonName == "" {
		return Pair{}, errors.New("certs: a certificate needs a common name")
	}
	if req.Validity == 0 {
		req.Validity = DefaultLeafValidity
	}
	tmpl, err := template(req)
	if err != nil {
		return Pair{}, err
	}
	switch req.Kind {
	case Node:
		if len(req.DNSNames) == 0 && len(req.IPs) == 0 {
			return Pair{}, errors.Newf("certs: node %q needs at least one host (DNS name or IP)", req.CommonName)
		}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames, tmpl.IPAddresses = req.DNSNames, req.IPs
	case Client:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames, tmpl.IPAddresses = req.DNSNames, req.IPs
	default:
		return Pair{}, errors.Newf("certs: unknown certificate kind %d", req.Kind)
	}
	if strings.HasPrefix(req.CommonName, IdentityScheme+":") {
		return Pair{}, errors.Newf("certs: common name %q: a name, not an identity URI", req.CommonName)
	}
	tmpl.URIs = []*url.URL{identityURI(req.Kind, req.CommonName)}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key, err := newKey(req.KeyType)
	if err != nil {
		return Pair{}, err
	}
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		tmpl.KeyUsage |= x509.KeyUsageKeyAgreement
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, key.Public(), a.Key)
	if err != nil {
		return Pair{}, errors.Wrapf(err, "certs: sign %q", req.CommonName)
	}
	keyPEM, err := marshalKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: certPEM(der), KeyPEM: keyPEM}, nil
}

func template(req Request) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, errors.Wrap(err, "certs: serial number")
	}
	if req.Validity < 0 {
		return nil, errors.Newf("certs: negative validity %s", req.Validity)
	}
	nb := req.NotBefore
	if nb.IsZero() {
		nb = time.Now().Add(-time.Minute)
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: []string{"streamwal"}},
		NotBefore:    nb,
		NotAfter:     nb.Add(req.Validity),
	}, nil
}

func newKey(t KeyType) (crypto.Signer, error) {
	switch t {
	case "", ECDSAP256:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		return k, errors.Wrap(err, "certs: generate key")
	case Ed25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, errors.Wrap(err, "certs: generate key")
	}
	return nil, errors.Newf("certs: unknown key type %q (want %s or %s)", t, ECDSAP256, Ed25519)
}

func marshalKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, errors.Wrap(err, "certs: marshal key")
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKey reads a PEM private key: PKCS #8, or EC / PKCS #1 of older tools.
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM private key")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, errors.Wrap(err, "parse private key")
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.Newf("private key of type %T cannot sign", key)
	}
	return s, nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// File names in a certificate directory.
const (
	CACert = "ca.crt"
	CAKey  = "ca.key"
)

// NodeFiles and ClientFiles are the names of a node's and a client's
// certificate and key.
func NodeFiles(name string) (cert, key string) {
	return "node." + name + ".crt", "node." + name + ".key"
}

// ClientFiles: see NodeFiles.
func ClientFiles(principal string) (cert, key string) {
	return "client." + principal + ".crt", "client." + principal + ".key"
}

// Write writes p as certFile (0644) and keyFile (0600) in dir, creating
// dir (0700) if missing. An existing file is ErrExists unless overwrite;
// then it is replaced by a rename, so a reader never sees half a file.
func Write(dir, certFile, keyFile string, p Pair, overwrite bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return errors.Wrap(err, "certs: directory")
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{{keyFile, p.KeyPEM, 0o600}, {certFile, p.CertPEM, 0o644}}
	if !overwrite {
		for _, f := range files {
			path := filepath.Join(dir, f.name)
			if _, err := os.Lstat(path); err == nil {
				return errors.Wrapf(ErrExists, "%s (give -overwrite to replace it)", path)
			}
		}
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.data, f.mode, overwrite); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, data []byte, mode os.FileMode, overwrite bool) error {
	if !overwrite {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, os.ErrExist) {
			return errors.Wrapf(ErrExists, "%s (give -overwrite to replace it)", path)
		}
		if err != nil {
			return errors.Wrap(err, "certs")
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return errors.Wrap(err, "certs")
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return errors.Wrap(err, "certs")
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close()
		return errors.Wrap(err, "certs")
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return errors.Wrap(err, "certs")
	}
	if err := tmp.Close(); err != nil {
		return errors.Wrap(err, "certs")
	}
	return errors.Wrap(os.Rename(tmp.Name(), path), "certs")
}

// Parse returns the first certificate of a PEM bundle.
func Parse(certPEM []byte) (*x509.Certificate, error) {
	rest := certPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("certs: no PEM certificate")
		}
		if block.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(block.Bytes)
			return c, errors.Wrap(err, "certs: parse certificate")
		}
		if len(bytes.TrimSpace(rest)) == 0 {
			return nil, errors.New("certs: no PEM certificate")
		}
	}
}

// IdentityScheme is the URI scheme of the identity SAN.
const IdentityScheme = "streamwal"

func identityURI(k Kind, name string) *url.URL {
	host := "client"
	if k == Node {
		host = "node"
	}
	return &url.URL{Scheme: IdentityScheme, Host: host, Path: "/" + name}
}

// Identity is who a certificate names, and as what.
type Identity struct {
	Kind Kind   // Node or Client
	Name string // the node's name or the client's principal
}

// ErrIdentity is a certificate whose identity is unclear: it matches the
// errors of Identify.
var ErrIdentity = errors.New("certs: no clear identity")

// Identify says who c names (package doc, "Identities"): a node when it
// carries streamwal://node/<name> and server use, a client when it carries
// streamwal://client/<name>, or, without either URI, a client named by its
// common name. The URI's name must be the common name; more than one
// identity URI, a node's without server use, a client's with server use,
// or no name at all is an error matching ErrIdentity.
func Identify(c *x509.Certificate) (Identity, error) {
	var found []*url.URL
	for _, u := range c.URIs {
		if u.Scheme == IdentityScheme {
			found = append(found, u)
		}
	}
	cn := c.Subject.CommonName
	serves := false
	for _, u := range c.ExtKeyUsage {
		if u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny {
			serves = true
		}
	}
	fail := func(format string, args ...any) (Identity, error) {
		return Identity{}, errors.Wrapf(ErrIdentity, format, args...)
	}
	switch len(found) {
	case 0:
		if cn == "" {
			return fail("no common name")
		}
		if strings.HasPrefix(cn, IdentityScheme+":") {
			return fail("common name %q looks like an identity URI, which only a SAN may carry", cn)
		}
		return Identity{Kind: Client, Name: cn}, nil
	case 1:
	default:
		return fail("%d identity URIs", len(found))
	}
	u := found[0]
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" || name != cn || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fail("identity %s does not name the common name %q", u, cn)
	}
	switch u.Host {
	case "node":
		if !serves {
			return fail("node identity %s without server use", u)
		}
		return Identity{Kind: Node, Name: name}, nil
	case "client":
		if serves {
			return fail("client identity %s with server use", u)
		}
		return Identity{Kind: Client, Name: name}, nil
	}
	return fail("identity %s is neither a node's nor a client's", u)
}

// nodeNamePattern is walnode's naming of nodes (-id n1, n2, ...).
var nodeNamePattern = regexp.MustCompile(`^n[0-9]+$`)

// ReservedClientName says why name may not be a client's principal, or ""
// when it may: root and names starting with "streamwal-" are etcd's users
// of root and of the nodes (package security/authz), and a client named
// like a node would be taken for it by anything that reads names only.
// nodeNames are the cluster's node names known to the caller; n<digits>,
// walnode's naming of nodes, is reserved whatever they are.
func ReservedClientName(name string, nodeNames []string) string {
	switch {
	case name == "root":
		return "root is etcd's root user, never a client's name"
	case strings.HasPrefix(name, "streamwal-"):
		return "names starting with streamwal- are etcd's users of the cluster's nodes, never a client's"
	}
	if nodeNamePattern.MatchString(name) {
		return "n<digits> is how nodes are named (walnode -id n1): a client named so would pass for one wherever only names are read"
	}
	for _, n := range nodeNames {
		if n == name {
			return "a node of this name exists: a client named like a node would pass for it wherever only names are read"
		}
	}
	return ""
}
