// Package tlsconf builds the *tls.Config of streamwal's servers and clients
// from PEM files, and keeps them current when the files are replaced.
//
// # What it promises
//
//   - A Config names files: a certificate chain and its key (what this side
//     presents), a CA bundle that verifies the peer (clients), and a client
//     CA bundle that makes a server require and verify client certificates
//     (mutual TLS). Config.Validate checks the shape (a certificate goes
//     with its key); Server and Client read the files and refuse anything
//     they cannot use, with a *FileError naming how the file was given (a
//     flag or a configuration key, Config.Names), its path and the reason:
//     missing or unreadable, no PEM certificate or key in it, a key that
//     does not match the certificate, a certificate already expired, a CA
//     file with no certificate. errors.Is(err, ErrInvalid) holds for all of
//     them.
//   - TLS 1.2 at least; 1.3 is negotiated whenever both sides speak it (Go's
//     default cipher suites, which are the secure ones). The standard
//     library's crypto only.
//   - Rotation without a restart. A server's certificate is looked up on
//     every handshake (tls.Config.GetCertificate), a client's when the
//     server asks for one (GetClientCertificate), and a server's client CA
//     bundle per handshake (GetConfigForClient). Each lookup compares the
//     files' identity, size and modification time with those last read
//     (two or three stat calls, no reading) and reads them again only when
//     they changed. So a new connection uses the replaced files, and an
//     established connection (a stream in flight) is not touched: TLS does
//     not re-authenticate it.
//   - A rotation that leaves something unusable (a new certificate with
//     the old key, because the two files are not replaced at once; a
//     truncated file; an expired certificate) keeps serving the last good
//     pair, logs the error once per change of the files (Config.Logger) and
//     reports it from Source.Err, and tries again when the files change
//     next. Write the key first and the certificate last, or replace both
//     by renames, to keep that window short.
//   - A client's CA bundle (the roots that verify servers) is read once,
//     when Client is called: a client process picks up a new CA when it
//     restarts. Rotate a CA by first adding the new CA to every bundle,
//     then reissuing certificates, then removing the old one.
//
// The configs carry NextProtos for HTTP/2 and HTTP/1.1 (servers); an
// http.Server or http.Transport given them negotiates HTTP/2 by ALPN.
package tlsconf
