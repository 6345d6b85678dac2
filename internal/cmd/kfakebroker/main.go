// Command kfakebroker runs an in-memory Kafka-protocol broker (franz-go's
// kfake) on loopback, for scripts that check streamwal against Kafka
// clients other than franz-go (scripts/interop.sh). It is a test broker:
// nothing is persisted, nothing is secured, and it is not for production.
//
//	go run ./internal/cmd/kfakebroker                # a port the kernel chooses
//	go run ./internal/cmd/kfakebroker -port 9092
//	go run ./internal/cmd/kfakebroker -log debug     # kfake's log on stderr
//
// Once it listens it prints its address (127.0.0.1:PORT) as the first line
// of stdout, so that a script can wait for that line rather than sleep, and
// it runs until SIGINT or SIGTERM. It is one broker that serves what the
// kafka backend and ordinary clients need: topic creation through the admin
// API and by metadata requests (auto-creation), transactions, consumer
// groups and read_committed fetches.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 0, "loopback port to listen on (0: one the kernel chooses)")
	logLevel := flag.String("log", "none", "kfake's log level on stderr: none, error, warn, info or debug")
	flag.Parse()
	if err := run(*port, *logLevel); err != nil {
		fmt.Fprintln(os.Stderr, "kfakebroker:", err)
		os.Exit(1)
	}
}

func run(port int, logLevel string) error {
	if port < 0 || port > 65535 {
		return errors.Newf("-port %d is not a TCP port", port)
	}
	level, err := parseLevel(logLevel)
	if err != nil {
		return err
	}
	// Signals are caught before the address is printed: a script that
	// stops the broker as soon as it read the address must not kill it
	// with the default action, half shut down.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)

	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.AllowAutoTopicCreation(),
		kfake.WithLogger(kfake.BasicLogger(os.Stderr, level)),
	)
	if err != nil {
		return errors.Wrapf(err, "start kfake on 127.0.0.1:%d", port)
	}
	defer c.Close()
	addrs := c.ListenAddrs()
	if len(addrs) != 1 {
		return errors.Newf("kfake listens on %v, want one address", addrs)
	}
	if _, err := fmt.Println(addrs[0]); err != nil {
		return err
	}
	s := <-sig
	fmt.Fprintf(os.Stderr, "kfakebroker: %v, stopping\n", s)
	return nil
}

func parseLevel(s string) (kfake.LogLevel, error) {
	switch s {
	case "none":
		return kfake.LogLevelNone, nil
	case "error":
		return kfake.LogLevelError, nil
	case "warn":
		return kfake.LogLevelWarn, nil
	case "info":
		return kfake.LogLevelInfo, nil
	case "debug":
		return kfake.LogLevelDebug, nil
	}
	return 0, errors.Newf("-log %q: want none, error, warn, info or debug", s)
}
