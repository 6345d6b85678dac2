package certs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/security/certs"
)

// A node certificate carries its hosts and both uses, a client one only
// client use; both chain to their CA, which LoadCA reads back.
func TestIssue(t *testing.T) {
	for _, kt := range []certs.KeyType{certs.ECDSAP256, certs.Ed25519} {
		t.Run(string(kt), func(t *testing.T) {
			dir := t.TempDir()
			ca, err := certs.NewCA(certs.Request{KeyType: kt})
			require.NoError(t, err)
			require.NoError(t, certs.Write(dir, certs.CACert, certs.CAKey, ca.Pair, false))
			loaded, err := certs.LoadCA(filepath.Join(dir, certs.CACert), filepath.Join(dir, certs.CAKey))
			require.NoError(t, err)
			roots := x509.NewCertPool()
			roots.AddCert(loaded.Cert)

			node, err := loaded.Issue(certs.Request{CommonName: "n1", Kind: certs.Node, KeyType: kt,
				DNSNames: []string{"n1.example"}, IPs: []net.IP{net.IPv4(10, 0, 0, 1)}})
			require.NoError(t, err)
			leaf, err := certs.Parse(node.CertPEM)
			require.NoError(t, err)
			require.Equal(t, "n1", leaf.Subject.CommonName)
			require.Equal(t, []string{"n1.example"}, leaf.DNSNames)
			require.True(t, leaf.IPAddresses[0].Equal(net.IPv4(10, 0, 0, 1)))
			require.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "n1.example", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			require.NoError(t, err)
			require.WithinDuration(t, time.Now().Add(certs.DefaultLeafValidity), leaf.NotAfter, 2*time.Minute)

			cl, err := loaded.Issue(certs.Request{CommonName: "alice", Kind: certs.Client, KeyType: kt})
			require.NoError(t, err)
			leaf, err = certs.Parse(cl.CertPEM)
			require.NoError(t, err)
			require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			require.Error(t, err, "a client certificate cannot serve")
		})
	}
}

// Files are written with private keys 0600, never over existing ones
// unless asked, and LoadCA refuses what is not a CA or not its key.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	require.NoError(t, certs.Write(dir, certs.CACert, certs.CAKey, ca.Pair, false))
	fi, err := os.Stat(filepath.Join(dir, certs.CAKey))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	err = certs.Write(dir, certs.CACert, certs.CAKey, ca.Pair, false)
	require.ErrorIs(t, err, certs.ErrExists)
	require.ErrorContains(t, err, "-overwrite")
	other, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	require.NoError(t, certs.Write(dir, certs.CACert, certs.CAKey, other.Pair, true))
	loaded, err := certs.LoadCA(filepath.Join(dir, certs.CACert), filepath.Join(dir, certs.CAKey))
	require.NoError(t, err)
	require.Equal(t, other.Cert.SerialNumber, loaded.Cert.SerialNumber, "overwritten")

	pair, err := other.Issue(certs.Request{CommonName: "n1", Kind: certs.Node, DNSNames: []string{"n1"}})
	require.NoError(t, err)
	require.NoError(t, certs.Write(dir, "n1.crt", "n1.key", pair, false))
	_, err = certs.LoadCA(filepath.Join(dir, "n1.crt"), filepath.Join(dir, "n1.key"))
	require.ErrorContains(t, err, "is not a CA certificate")
	require.NoError(t, certs.Write(dir, "x.crt", "x.key", certs.Pair{CertPEM: other.Pair.CertPEM, KeyPEM: ca.Pair.KeyPEM}, false))
	_, err = certs.LoadCA(filepath.Join(dir, "x.crt"), filepath.Join(dir, "x.key"))
	require.ErrorContains(t, err, "does not match the certificate")

	_, err = certs.NewCA(certs.Request{KeyType: "rsa"})
	require.ErrorContains(t, err, `unknown key type "rsa"`)
	_, err = other.Issue(certs.Request{CommonName: "n2", Kind: certs.Node})
	require.ErrorContains(t, err, "needs at least one host")
}

// Identify tells nodes and clients apart by the identity URI and the key
// usage, never by a name: a client certificate named like a node (or
// root) is a client, and a certificate whose marks contradict each other
// identifies no one.
func TestIdentify(t *testing.T) {
	ca, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	issue := func(req certs.Request) *x509.Certificate {
		p, err := ca.Issue(req)
		require.NoError(t, err)
		c, err := certs.Parse(p.CertPEM)
		require.NoError(t, err)
		return c
	}
	node := issue(certs.Request{CommonName: "n1", Kind: certs.Node, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	id, err := certs.Identify(node)
	require.NoError(t, err)
	require.Equal(t, certs.Identity{Kind: certs.Node, Name: "n1"}, id)
	require.Equal(t, "streamwal://node/n1", node.URIs[0].String())
	for _, name := range []string{"n1", "root", "alice"} {
		id, err := certs.Identify(issue(certs.Request{CommonName: name, Kind: certs.Client}))
		require.NoError(t, err)
		require.Equal(t, certs.Identity{Kind: certs.Client, Name: name}, id, "a client named %s is a client", name)
	}
	_, err = ca.Issue(certs.Request{CommonName: "streamwal://node/n1", Kind: certs.Client})
	require.Error(t, err)

	// Certificates made by other tools.
	other := func(cn string, uris []string, usage ...x509.ExtKeyUsage) *x509.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: usage}
		for _, u := range uris {
			pu, err := url.Parse(u)
			require.NoError(t, err)
			tmpl.URIs = append(tmpl.URIs, pu)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
		require.NoError(t, err)
		c, err := x509.ParseCertificate(der)
		require.NoError(t, err)
		return c
	}
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	id, err = certs.Identify(other("n2", nil, server...))
	require.NoError(t, err)
	require.Equal(t, certs.Identity{Kind: certs.Client, Name: "n2"}, id, "no URI: a client, even with server use and a node's name")
	for _, bad := range []*x509.Certificate{
		other("", nil, x509.ExtKeyUsageClientAuth),
		other("streamwal://node/n1", nil, x509.ExtKeyUsageClientAuth),
		other("n1", []string{"streamwal://node/n1"}, x509.ExtKeyUsageClientAuth),
		other("alice", []string{"streamwal://client/alice"}, server...),
		other("alice", []string{"streamwal://node/n1"}, server...),
		other("n1", []string{"streamwal://node/n1", "streamwal://client/n1"}, server...),
		other("n1", []string{"streamwal://admin/n1"}, server...),
	} {
		_, err := certs.Identify(bad)
		require.ErrorIs(t, err, certs.ErrIdentity, "%s %v", bad.Subject.CommonName, bad.URIs)
	}

	for _, name := range []string{"root", "streamwal-node", "n1", "n42", "edge"} {
		require.NotEmpty(t, certs.ReservedClientName(name, []string{"edge"}), name)
	}
	require.Empty(t, certs.ReservedClientName("alice", []string{"edge"}))
	require.Empty(t, certs.ReservedClientName("nina", nil))
}
