package examples_test

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Every example must stop what it starts: WALs, scanners, stores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// appendText appends a message with payload text.
func appendText(ctx context.Context, w adaptor.WAL, text string) adaptor.AppendResult {
	m, err := message.New([]byte(text), nil)
	if err != nil {
		panic(err)
	}
	r, err := w.Append(ctx, m)
	if err != nil {
		panic(err)
	}
	return r
}

// receive returns the scanner's next message, or panics with why it ended.
func receive(s walimpls.Scanner) message.Immutable {
	m, ok := <-s.Chan()
	if !ok {
		panic(fmt.Sprintf("scanner ended: %v", s.Error()))
	}
	return m
}
