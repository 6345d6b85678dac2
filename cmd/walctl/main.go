// Command walctl looks at and steers a streamwal cluster.
//
//	walctl nodes                       the registered nodes
//	walctl channels                    each channel's owner, term and state
//	walctl move <channel> [<node>]     move a channel (to the least loaded other node)
//	walctl drain <node>                move every channel off a node, and keep it empty
//	walctl undrain <node>              let a drained node take channels again
//	walctl rebalance                   move channels until live nodes' counts differ by at most one
//	walctl append <channel> [msg...]   append the arguments, or stdin's lines
//	walctl tail <channel>              follow a channel's messages
//
// Flags before the command: -etcd (endpoints, default http://127.0.0.1:2379),
// -root (the cluster's root), -json (machine-readable output), -timeout.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/meta/etcdstore"
)

type ctl struct {
	cli    *clientv3.Client
	layout cluster.Layout
	json   bool
	out    io.Writer
	errOut io.Writer
	in     io.Reader
	// tty reports whether stderr is a terminal (progress lines when piping).
	tty bool
}

func main() {
	etcd := flag.String("etcd", "http://127.0.0.1:2379", "etcd endpoints, comma-separated")
	root := flag.String("root", cluster.DefaultRoot, "the cluster's root in etcd")
	asJSON := flag.Bool("json", false, "print JSON, one object per line")
	timeout := flag.Duration("timeout", 30*time.Second, "bound on each command but tail")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: walctl [flags] nodes|channels|move|drain|undrain|rebalance|append|tail [args]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *etcd, *root, *asJSON, *timeout, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "walctl:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, etcd, root string, asJSON bool, timeout time.Duration, args []string) error {
	layout, err := cluster.NewLayout(root)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cli, err := etcdstore.Dial(dctx, etcdstore.Config{Endpoints: strings.Split(etcd, ",")})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	st, _ := os.Stderr.Stat()
	c := &ctl{cli: cli, layout: layout, json: asJSON, out: os.Stdout, errOut: os.Stderr, in: os.Stdin,
		tty: st != nil && st.Mode()&os.ModeCharDevice != 0}
	cmd, rest := args[0], args[1:]
	if cmd != "tail" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	switch cmd {
	case "nodes":
		return c.nodes(ctx)
	case "channels":
		return c.channels(ctx)
	case "move":
		if len(rest) < 1 || len(rest) > 2 {
			return errors.New("usage: walctl move <channel> [<node>]")
		}
		to := ""
		if len(rest) == 2 {
			to = rest[1]
		}
		return c.done(coordinator.RequestMove(ctx, cli, layout, rest[0], to), "move requested", map[string]string{"channel": rest[0], "to": to})
	case "drain", "undrain":
		if len(rest) != 1 {
			return errors.Newf("usage: walctl %s <node>", cmd)
		}
		if cmd == "drain" {
			return c.done(coordinator.RequestDrain(ctx, cli, layout, rest[0]), "drain requested", map[string]string{"node": rest[0]})
		}
		return c.done(coordinator.Undrain(ctx, cli, layout, rest[0]), "undrained", map[string]string{"node": rest[0]})
	case "rebalance":
		return c.rebalance(ctx)
	case "append":
		if len(rest) < 1 {
			return errors.New("usage: walctl append <channel> [message...]  (no messages: stdin's lines)")
		}
		return c.append(ctx, rest[0], rest[1:])
	case "tail":
		if len(rest) != 1 {
			return errors.New("usage: walctl tail <channel>")
		}
		return c.tail(ctx, rest[0])
	}
	return errors.Newf("unknown command %q (nodes, channels, move, drain, undrain, rebalance, append, tail)", cmd)
}

// done reports a steering command's outcome.
func (c *ctl) done(err error, what string, fields map[string]string) error {
	if err != nil {
		return err
	}
	if c.json {
		fields["result"] = what
		return json.NewEncoder(c.out).Encode(fields)
	}
	_, err = fmt.Fprintln(c.out, what)
	return err
}

func (c *ctl) snapshot(ctx context.Context) (cluster.Snapshot, error) {
	v, err := cluster.Watch(ctx, c.cli, c.layout, nil)
	if err != nil {
		return cluster.Snapshot{}, err
	}
	defer v.Close()
	s, _ := v.Snapshot()
	return s, nil
}

func (c *ctl) nodes(ctx context.Context) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	count := map[string]int{}
	for _, a := range s.Assignments {
		count[a.Value.Node]++
	}
	ids := sortedKeys(s.Nodes)
	if c.json {
		enc := json.NewEncoder(c.out)
		for _, id := range ids {
			n := s.Nodes[id].Value
			_, drained := s.Drains[id]
			if err := enc.Encode(map[string]any{"id": id, "addr": n.Addr, "started": n.Started, "channels": count[id], "drained": drained}); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tADDR\tCHANNELS\tSTARTED\tDRAINED")
	for _, id := range ids {
		n := s.Nodes[id].Value
		_, drained := s.Drains[id]
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%v\n", id, n.Addr, count[id], n.Started.Format(time.RFC3339), drained)
	}
	return w.Flush()
}

func (c *ctl) channels(ctx context.Context) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	names := sortedKeys(s.Assignments)
	if c.json {
		enc := json.NewEncoder(c.out)
		for _, name := range names {
			a := s.Assignments[name].Value
			_, live := s.Nodes[a.Node]
			if err := enc.Encode(map[string]any{"channel": name, "owner": a.Node, "term": a.Term, "state": a.State,
				"owner_live": live, "since": a.Since, "previous": a.Previous, "open_error": s.Opened[name].Value.Error}); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CHANNEL\tOWNER\tTERM\tSTATE\tSINCE")
	for _, name := range names {
		a := s.Assignments[name].Value
		state := string(a.State)
		if _, live := s.Nodes[a.Node]; !live {
			state += " (owner gone)"
		}
		if o := s.Opened[name].Value; o.Error != "" && o.Term == a.Term {
			state += " (open failed: " + o.Error + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", name, a.Node, a.Term, state, a.Since.Format(time.RFC3339))
	}
	return w.Flush()
}

// rebalance requests the moves that bring the live, undrained nodes'
// channel counts within one of each other: each from a most loaded node to
// a least loaded one (every move is a planned move: term + 1).
func (c *ctl) rebalance(ctx context.Context) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	moves := planRebalance(s)
	for _, m := range moves {
		if err := coordinator.RequestMove(ctx, c.cli, c.layout, m.channel, m.to); err != nil {
			return err
		}
		if c.json {
			if err := json.NewEncoder(c.out).Encode(map[string]string{"channel": m.channel, "from": m.from, "to": m.to}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(c.out, "move %s: %s -> %s\n", m.channel, m.from, m.to)
	}
	if len(moves) == 0 && !c.json {
		fmt.Fprintln(c.out, "balanced")
	}
	return nil
}

type plannedMove struct{ channel, from, to string }

// planRebalance moves channels from the most to the least loaded live,
// undrained node until their counts differ by at most one; ties by ID.
func planRebalance(s cluster.Snapshot) []plannedMove {
	owned := map[string][]string{}
	var nodes []string
	for id := range s.Nodes {
		if _, drained := s.Drains[id]; !drained {
			nodes = append(nodes, id)
			owned[id] = nil
		}
	}
	if len(nodes) < 2 {
		return nil
	}
	for _, ch := range sortedKeys(s.Assignments) {
		if a := s.Assignments[ch].Value; owned[a.Node] != nil || slices.Contains(nodes, a.Node) {
			owned[a.Node] = append(owned[a.Node], ch)
		}
	}
	slices.Sort(nodes)
	var moves []plannedMove
	for {
		most, least := nodes[0], nodes[0]
		for _, id := range nodes {
			if len(owned[id]) > len(owned[most]) {
				most = id
			}
			if len(owned[id]) < len(owned[least]) {
				least = id
			}
		}
		if len(owned[most])-len(owned[least]) <= 1 {
			return moves
		}
		ch := owned[most][len(owned[most])-1]
		owned[most] = owned[most][:len(owned[most])-1]
		owned[least] = append(owned[least], ch)
		moves = append(moves, plannedMove{channel: ch, from: most, to: least})
	}
}

// append appends the arguments, or stdin's lines, one message each, with a
// progress line every second on a terminal when reading a pipe.
func (c *ctl) append(ctx context.Context, channel string, msgs []string) error {
	cl, err := client.New(ctx, client.Config{Etcd: c.cli, Root: c.layout.Root})
	if err != nil {
		return err
	}
	defer cl.Close()
	send := func(text string) error {
		r, err := cl.Append(ctx, channel, client.Message{Payload: []byte(text)}, client.Options{})
		if err != nil {
			return err
		}
		if c.json {
			return json.NewEncoder(c.out).Encode(map[string]any{"id": r.ID, "timetick": r.TimeTick, "term": r.Term, "node": r.Node})
		}
		if len(msgs) > 0 {
			_, err = fmt.Fprintf(c.out, "%s at %s (term %d, node %s)\n", text, r.ID, r.Term, r.Node)
		}
		return err
	}
	if len(msgs) > 0 {
		for _, m := range msgs {
			if err := send(m); err != nil {
				return err
			}
		}
		return nil
	}
	sc := bufio.NewScanner(c.in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	n, last := 0, time.Now()
	for sc.Scan() {
		if err := send(sc.Text()); err != nil {
			return errors.Wrapf(err, "line %d", n+1)
		}
		n++
		if c.tty && time.Since(last) >= time.Second {
			fmt.Fprintf(c.errOut, "\rappended %d", n)
			last = time.Now()
		}
	}
	if c.tty {
		fmt.Fprintf(c.errOut, "\rappended %d\n", n)
	} else if !c.json {
		fmt.Fprintf(c.out, "appended %d\n", n)
	}
	return sc.Err()
}

// tail follows a channel until interrupted.
func (c *ctl) tail(ctx context.Context, channel string) error {
	cl, err := client.New(ctx, client.Config{Etcd: c.cli, Root: c.layout.Root})
	if err != nil {
		return err
	}
	defer cl.Close()
	enc := json.NewEncoder(c.out)
	return cl.Read(ctx, channel, client.ReadOptions{}, func(d *streamwalv1.Delivered) error {
		if c.json {
			return enc.Encode(map[string]any{"id": d.GetId(), "timetick": d.GetTimetick(), "term": d.GetTerm(),
				"payload": string(d.GetPayload()), "properties": d.GetProperties(), "vchannel": d.GetVchannel()})
		}
		_, err := fmt.Fprintf(c.out, "%s\t%d\t%s\n", d.GetId(), d.GetTerm(), d.GetPayload())
		return err
	})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
