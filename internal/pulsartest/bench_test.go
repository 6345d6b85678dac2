package pulsartest_test

import (
	"context"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/pulsartest"
)

// BenchmarkRawClient measures the raw client against the broker: 1 KiB
// messages, default batching, async sends; then a reader scanning them.
func BenchmarkRawClient(b *testing.B) {
	br, err := pulsartest.New(pulsartest.Config{})
	require.NoError(b, err)
	defer br.Close()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: br.URL(), Logger: plog.DefaultNopLogger()})
	require.NoError(b, err)
	defer c.Close()
	payload := make([]byte, 1024)
	topic := "persistent://public/default/bench"

	b.Run("produce", func(b *testing.B) {
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		require.NoError(b, err)
		defer p.Close()
		b.SetBytes(int64(len(payload)))
		errs := make(chan error, 1)
		for b.Loop() {
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				})
		}
		require.NoError(b, p.FlushWithCtx(context.Background()))
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
	})
	b.Run("read", func(b *testing.B) {
		r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		require.NoError(b, err)
		defer r.Close()
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			if !r.HasNext() {
				b.StopTimer()
				p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
				require.NoError(b, err)
				for range 10000 {
					p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload}, nil)
				}
				require.NoError(b, p.FlushWithCtx(context.Background()))
				p.Close()
				b.StartTimer()
			}
			_, err := r.Next(context.Background())
			require.NoError(b, err)
		}
	})
}
