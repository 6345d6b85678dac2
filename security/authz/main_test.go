package authz_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests run TLS servers and clients; none may outlive its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
