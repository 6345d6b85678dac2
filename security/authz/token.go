package authz

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"

	"github.com/cockroachdb/errors"
)

// TokenPrefix starts every token NewToken makes, so that a token pasted
// where its hash belongs is recognised and refused.
const TokenPrefix = "swt_"

// tokenBytes is a token's entropy.
const tokenBytes = 32

// NewToken returns a new bearer token, 32 bytes of random (crypto/rand's
// Reader when random is nil) in base64url after TokenPrefix, and the line
// that goes into a policy's tokens list (HashToken). Show the token to its
// holder once; keep only the hash.
func NewToken(random io.Reader) (token, hash string, err error) {
	if random == nil {
		random = rand.Reader
	}
	var b [tokenBytes]byte
	if _, err := io.ReadFull(random, b[:]); err != nil {
		return "", "", errors.Wrap(err, "authz: token randomness")
	}
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token), nil
}

// HashToken is the form of a token a policy holds: "sha256:" and the hex
// SHA-256 of the token's text.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hashPrefix + hex.EncodeToString(sum[:])
}

func sha256Sum(token string) [32]byte { return sha256.Sum256([]byte(token)) }
