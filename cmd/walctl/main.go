// Command walctl looks at and steers a streamwal cluster.
//
//	walctl nodes                       the registered nodes
//	walctl channels                    each channel's owner, term and state
//	walctl explain <channel>           why a channel serves or not, from the cluster and its owner
//	walctl move <channel> [<node>]     move a channel (to the least loaded other node)
//	walctl drain <node>                move every channel off a node, and keep it empty
//	walctl undrain <node>              let a drained node take channels again
//	walctl rebalance                   move channels until live nodes' counts differ by at most one
//	walctl migrate <channel> <backend> move a channel's writes to another backend (-all, -cancel, -dry-run)
//	walctl append <channel> [msg...]   append the arguments, or stdin's lines
//	walctl tail <channel>              print a channel's messages, and follow it
//	walctl commit <ch> <consumer> <cp> commit a consumer's checkpoint through the channel's owner
//	walctl checkpoints <channel>       a channel's consumers and what its log retains (-drop)
//	walctl token create                a bearer token, and its hash for the policy
//	walctl policy <file> [<p> <a> <ch>] check a policy file, or one decision of it
//	walctl etcd-roles                  create the etcd roles that guard the cluster's keys
//	walctl etcd-auth                   turn etcd's authentication on with the users a policy implies
//	walctl certs create-ca|create-node|create-client [<name>]   a CA, node and client certificates
//	walctl help [<command>]            the commands, or one command's flags
//
// Flags may come before or after the command and its arguments (after
// "--" everything is an argument): -etcd (endpoints, default
// http://127.0.0.1:2379), -root (the cluster's root), -json (one JSON
// object per line), -timeout (the bound on a command; tail only has one
// when given), -token-file (the bearer token for nodes with authorization
// on), -etcd-user and -etcd-password-file (for etcd with authentication
// on), -ca, -cert and -key (TLS to the nodes and to an https etcd, whose
// own can be given with -etcd-ca, -etcd-cert and -etcd-key), and each
// command's own (walctl help <command>).
//
// Exit status: 0 when the command took effect, 1 when it failed or the
// cluster refused it (the reason is printed; it does not take effect
// later), 2 for a command line walctl cannot run (with the usage), 3 when
// migrate gave up on a migration it could not take back: pending, it may
// still take effect (the command that cancels or undoes it is printed).
//
// A request that cannot take effect is refused before it is written when
// the cluster's current state already says so (an unknown channel or node,
// a node that is not live or drained, nowhere to move to, draining the last
// node, migrating a channel to the backend it is on or to one the
// coordinator does not have), and otherwise
// reported when the coordinator refuses it: move and migrate wait for the
// coordinator's decision (it records why it drops a request,
// cluster.MoveRefusal), drain until the node's channels have moved.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/meta/etcdstore"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1 // the command failed, or the cluster refused it: it does not take effect
	exitUsage   = 2 // a command line walctl cannot run
	exitPending = 3 // the command gave up, but what it asked for may still take effect (errPending)
	defaultEtcd = "http://127.0.0.1:2379"
)

// options are every flag's value; each command defines the global flags
// and its own.
type options struct {
	etcd, root    string
	json          bool
	timeout       time.Duration
	timeoutGiven  bool
	wait          bool
	from          string
	last          int
	untilCaughtUp bool
	verbose       bool
	// migrate's.
	all, dryRun, cancel bool
	// commit's and checkpoints' (checkpoints.go).
	vchannel, drop string
	// Credentials (auth.go): files, so that no secret is on the command
	// line.
	tokenFile, etcdUser, etcdPasswordFile string
	// authzFile and passwordDir: walctl etcd-auth.
	authzFile, passwordDir string
	sec                    secOpts
	certs                  certOpts
}

// flagDef defines one flag on a flag set.
type flagDef struct {
	name   string
	isBool bool
	define func(fs *flag.FlagSet, o *options)
}

var globalFlags = []flagDef{
	{"etcd", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.etcd, "etcd", defaultEtcd, "etcd endpoints, comma-separated")
	}},
	{"root", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.root, "root", cluster.DefaultRoot, "the cluster's root in etcd")
	}},
	{"json", true, func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.json, "json", false, "print JSON, one object per line")
	}},
	{"timeout", false, func(fs *flag.FlagSet, o *options) {
		fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound on the command, its waits included (tail: none unless given)")
	}},
	{"token-file", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.tokenFile, "token-file", "", "`file` holding the bearer token sent to the nodes (walctl token create)")
	}},
	{"etcd-user", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.etcdUser, "etcd-user", "", "etcd user `name` (with -etcd-password-file), when etcd's authentication is on")
	}},
	{"etcd-password-file", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.etcdPasswordFile, "etcd-password-file", "", "`file` holding the etcd user's password")
	}},
}

var commandFlags = map[string]flagDef{
	"v": {"v", true, func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.verbose, "v", false, "also time each channel's last move by phase (asks each owner for its status), and show its chain: backend, segment, migration")
	}},
	"wait": {"wait", true, func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.wait, "wait", false, "also wait until the new owners serve the channels (bounded by -timeout)")
	}},
	"from": {"from", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.from, "from", "", "start at this `position` (as tail prints it; \"start\" for the first message kept)")
	}},
	"n": {"n", false, func(fs *flag.FlagSet, o *options) {
		fs.IntVar(&o.last, "n", -1, "print only the last `N` messages appended before tail started, then follow (0: only new ones)")
	}},
	"all": {"all", true, func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.all, "all", false, "every channel not on the backend already")
	}},
	"dry-run": {"dry-run", true, func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.dryRun, "dry-run", false, "print the plan (each channel's backend and segment, term and owner) and write nothing")
	}},
	"cancel": {"cancel", true, func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.cancel, "cancel", false, "withdraw the channel's migration, before its seal")
	}},
	"until-caught-up": {"until-caught-up", true, func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.untilCaughtUp, "until-caught-up", false, "exit once every message appended before tail started is printed")
	}},
	"vchannel": {"vchannel", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.vchannel, "vchannel", "", "the consumer's `vchannel` (default: a consumer of the whole channel)")
	}},
	"authz": {"authz", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.authzFile, "authz", "", "the nodes' -authz policy `file`: its principals become etcd users")
	}},
	"passwords": {"passwords", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.passwordDir, "passwords", "", "`directory` of the users' passwords, <user>.password (made 0600 when missing)")
	}},
	"drop": {"drop", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.drop, "drop", "", "remove this `consumer` (with -vchannel: its consumer of that vchannel): it no longer holds the log back")
	}},
}

// command is one walctl command.
type command struct {
	name, args, summary string
	// detail is the rest of its help.
	detail           string
	minArgs, maxArgs int // maxArgs -1: any number
	flags            []string
	// offline: the command needs no cluster (no etcd connection).
	offline bool
	run     func(ctx context.Context, c *ctl, args []string) error

	// check, when set, reports flags and arguments the command cannot
	// run with ("" when it can).
	check func(o options, args []string) string
}

var commands = []*command{
	{name: "nodes", summary: "the registered nodes: address, channels, start, drained",
		run: func(ctx context.Context, c *ctl, _ []string) error { return c.nodes(ctx) }},
	{name: "channels", summary: "each channel's owner, term and state", flags: []string{"v"},
		detail: `-v adds how the channel came to its owner (DETECTED: the previous owner's
death was detected, and when) and the phases of that move: decide (from the
detection, or the assignment, to the new owner seeing it), fence (the
backend's open at the new term, which fences the old owner), tail (the end
of the log found, the term-begin written) and first (the first append
acknowledged at the term). decide spans the leader's clock and the owner's.
From the channels' chains (in the cluster's meta store) it also shows the
backend entry and channel each one writes on, its segment, and a migration
pending or requested (walctl migrate); from the owners' status, what each
log retains (RETAINED: bytes and messages; OLDEST: the oldest message's
age; HELD BY: the consumer, or rule, that keeps it; walctl checkpoints).`,
		run: func(ctx context.Context, c *ctl, _ []string) error { return c.channels(ctx) }},
	{name: "explain", args: "<channel>", minArgs: 1, maxArgs: 1,
		summary: "why a channel serves or not: owner, term, state, health, last append, readers",
		detail: `Reads the cluster's state and asks the owner for its view of the channel
(its Status), and says why the channel is not serving when it is not: no
live node, owner gone or drained, opening since when, open failing with
which error, fenced, or stalled. It also shows the backend and segments
the channel's chain keeps, what its log retains as the owner measured it
(bytes and messages, per segment when several; the oldest message and its
age; who holds the log back; what the retention policy dropped) and its
consumers with their checkpoints' ages, the slowest first.`,
		run: func(ctx context.Context, c *ctl, args []string) error { return c.explain(ctx, args[0]) }},
	{name: "move", args: "<channel> [<node>]", minArgs: 1, maxArgs: 2, flags: []string{"wait"},
		summary: "move a channel to a node (default: the least loaded other live node)",
		detail: `A planned move: the channel's term goes up by one and the new owner
fences the old one. Refused at once for an unknown channel or node, a node
that is not live or is drained, the channel's own owner, or when no other
live node exists; otherwise walctl waits for the coordinator's decision and
reports a refusal with its reason. -wait also waits until the new owner
serves the channel.`,
		run: func(ctx context.Context, c *ctl, args []string) error {
			to := ""
			if len(args) == 2 {
				to = args[1]
			}
			return c.move(ctx, args[0], to)
		}},
	{name: "drain", args: "<node>", minArgs: 1, maxArgs: 1, flags: []string{"wait"},
		summary: "move every channel off a node, and keep it empty until undrain",
		detail: `Refused at once for an unknown node, or when the node holds channels and no
other live node could take them. walctl then waits until none of the
node's channels is assigned to it any more; -wait also waits until their
new owners serve them.`,
		run: func(ctx context.Context, c *ctl, args []string) error { return c.drain(ctx, args[0]) }},
	{name: "undrain", args: "<node>", minArgs: 1, maxArgs: 1,
		summary: "let a drained node take channels again",
		run:     func(ctx context.Context, c *ctl, args []string) error { return c.undrain(ctx, args[0]) }},
	{name: "rebalance", flags: []string{"wait"},
		summary: "move channels until the live nodes' counts differ by at most one",
		detail:  `Each move is a planned move, requested and decided one after the other.`,
		run:     func(ctx context.Context, c *ctl, _ []string) error { return c.rebalance(ctx) }},
	{name: "migrate", args: "<channel> <backend>", minArgs: 1, maxArgs: 2, flags: []string{"all", "dry-run", "wait", "cancel"},
		summary: "move a channel's writes to another backend entry (-all: every channel)",
		detail: `A planned migration: the coordinator records the intent in the channel's
chain at its next term and assigns the channel at that term (to the same
owner while it is live); the owner's open fences the old segment, seals it
and opens a new segment on <backend>, an entry of the nodes' configuration.
Readers go on across both. walctl waits for the coordinator's decision
(the migration started, or refused with its reason); -wait also waits
until the chain ends on <backend> and the owner serves it at the new term,
printing "k/n migrated".

  walctl migrate <channel> <backend>   one channel
  walctl migrate -all <backend>        every channel not on it already
                                       (requests written a few at a time)
  walctl migrate -cancel <channel>     withdraw a migration before its seal
                                       (once sealed, migrate back to undo it)

Refused at once for an unknown channel, one on <backend> already, or one
with another migration pending, and for what the coordinator would refuse:
a <backend> that is none of the entries it publishes (the error lists
them), or a coordinator that runs without chains. -dry-run is refused the
same way; otherwise it prints each channel's backend and segment, its term
and the new one, and its owner, and writes nothing. Exit status 1 names
every channel refused, with the reason.

When walctl gives up (-timeout, Ctrl-C, etcd failing) it takes back what
is not done, so that a migrate reported as failed never takes effect
later: a request the coordinator has not acted on is withdrawn, an intent
it recorded is cancelled before its seal (as -cancel does); exit status 1.
What it cannot take back (sealed already: the channel writes on
<backend>; or etcd unreachable) is reported PENDING with the command that
undoes it (walctl migrate <channel> <former backend>) or cancels it
(walctl migrate -cancel <channel>): exit status 3, it may still take
effect.`,
		run: func(ctx context.Context, c *ctl, args []string) error {
			channel, backend, _ := migrateArgs(c.opts, args)
			return c.migrate(ctx, channel, backend)
		}},
	{name: "append", args: "<channel> [<message>...]", minArgs: 1, maxArgs: -1,
		summary: "append the messages, or stdin's lines, one message each",
		detail: `An unknown channel is refused at once. A message that starts with "-"
goes after "--": walctl append pch-0 -- -1.`,
		run: func(ctx context.Context, c *ctl, args []string) error { return c.append(ctx, args[0], args[1:]) }},
	{name: "tail", args: "<channel>", minArgs: 1, maxArgs: 1, flags: []string{"from", "n", "until-caught-up"},
		summary: "print a channel's messages and follow it (Ctrl-C to stop)",
		detail: `Prints one line per message: its position, the time of its timetick, the
term of the owner that stored it, and its payload. -from <position> starts
at the message printed with that position. Without -from or -n it starts
at the first message kept.`,
		run: func(ctx context.Context, c *ctl, args []string) error { return c.tail(ctx, args[0]) }},
	commitCommand,
	checkpointsCommand,
	{name: "token", args: "create", minArgs: 1, maxArgs: 1, offline: true,
		summary: "create a bearer token: prints it once, and the hash line for the policy",
		detail: `Prints the new token on the first line (give it to its holder, for
example in the file of walctl -token-file or the client's Config.Token:
it is shown this once and stored nowhere) and, on the second, the hash to
list under the principal's tokens in the node's -authz policy. Needs no
cluster.`,
		run: func(_ context.Context, c *ctl, args []string) error { return c.tokenCreate(args[0]) }},
	{name: "policy", args: "<file> [<principal> <action> <channel>]", minArgs: 1, maxArgs: 4, offline: true,
		summary: "check a node's -authz policy file, or whether it lets a principal do an action on a channel",
		detail: `With the file only: loads it as walnode would and prints what it holds,
or every problem with its line and key path (exit 1). With a principal, an
action (append, read, admin) and a channel ("" or "*" for every channel,
as Status needs): prints allowed or denied, exit 0 or 1. Needs no
cluster.`,
		run: func(_ context.Context, c *ctl, args []string) error { return c.policy(args) }},
	{name: "etcd-roles",
		summary: "create the etcd roles that guard the cluster's keys (node, admin, reader)",
		detail: `Creates streamwal-node (readwrite on the root and its pool's keys),
streamwal-admin (read on the root, readwrite on its move, drain and migrate
requests, on the channels' chains and on the consumers' checkpoints) and
streamwal-reader (read on the root, the chains and the checkpoints),
granting them again if
they exist. Run it as etcd's root user; then bind users to the roles and
turn authentication on with etcdctl (printed at the end).`,
		run: func(ctx context.Context, c *ctl, _ []string) error { return c.etcdRoles(ctx) }},
	{name: "etcd-auth", flags: []string{"authz", "passwords"},
		summary: "turn etcd's authentication on, with the users a policy implies; keep them in step",
		detail: `What a walnode with -authz does to its embedded etcd, for an etcd of your own:
creates the roles of etcd-roles, the user root and streamwal-node (the
nodes: -etcd-user streamwal-node -etcd-password-file <dir>/streamwal-node.password),
one user per principal of -authz (streamwal-admin for one that holds admin
on every channel, else streamwal-reader), deletes the users of those two
roles the policy no longer names, and turns authentication on. Each user's
password is <-passwords>/<user>.password, made (0600) when missing; give
each file to its user (walctl -etcd-user <user> -etcd-password-file <file>).
Run it again after changing the policy. Once authentication is on, run it
as root: -etcd-user root -etcd-password-file <-passwords>/root.password.
Users are bound by name and password: give etcd no --client-cert-auth, or a
client certificate named like a user (root) is that user.`,
		check: func(o options, _ []string) string {
			if o.authzFile == "" || o.passwordDir == "" {
				return "etcd-auth needs -authz <policy file> and -passwords <directory>"
			}
			return ""
		},
		run: func(ctx context.Context, c *ctl, _ []string) error { return c.etcdAuth(ctx) }},
	certsCommand,
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// env is where a run reads and writes.
type env struct {
	in          io.Reader
	out, errOut io.Writer
	// tty reports whether errOut is a terminal (progress lines).
	tty bool
	// requested, when set, is called once migrate has written (or failed
	// to write) every request it planned: tests stop walctl after it
	// instead of guessing when the writes are over.
	requested func()
}

func main() {
	st, _ := os.Stderr.Stat()
	e := env{in: os.Stdin, out: os.Stdout, errOut: os.Stderr, tty: st != nil && st.Mode()&os.ModeCharDevice != 0}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], e)
	stop()
	os.Exit(code)
}

// run runs walctl's command line and returns its exit status.
func run(ctx context.Context, args []string, e env) int {
	name := findCommand(args)
	switch name {
	case "":
		if slices.ContainsFunc(args, isHelpFlag) {
			printUsage(e.out)
			return exitOK
		}
		fmt.Fprintln(e.errOut, "walctl: no command")
		printUsage(e.errOut)
		return exitUsage
	case "help":
		return help(args, e)
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(e.errOut, "walctl: unknown command %q\n", name)
		printUsage(e.errOut)
		return exitUsage
	}
	var o options
	fs := newFlagSet(cmd.name, cmd.flags, &o)
	pos, err := parseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printHelp(e.out, cmd)
		return exitOK
	case err != nil:
		return usageError(e, cmd, err.Error())
	}
	if len(pos) == 0 || pos[0] != cmd.name {
		return usageError(e, cmd, "the command must come first among the arguments")
	}
	pos = pos[1:] // the command's name
	if len(pos) < cmd.minArgs || (cmd.maxArgs >= 0 && len(pos) > cmd.maxArgs) {
		what := "no arguments"
		if cmd.args != "" {
			what = cmd.args
		}
		return usageError(e, cmd, fmt.Sprintf("wants %s, got %d argument(s)", what, len(pos)))
	}
	fs.Visit(func(f *flag.Flag) { o.timeoutGiven = o.timeoutGiven || f.Name == "timeout" })
	if msg := o.check(); msg != "" {
		return usageError(e, cmd, msg)
	}
	if cmd.name == "migrate" {
		if _, _, msg := migrateArgs(o, pos); msg != "" {
			return usageError(e, cmd, msg)
		}
	}
	if cmd.check != nil {
		if msg := cmd.check(o, pos); msg != "" {
			return usageError(e, cmd, msg)
		}
	}
	if err := execute(ctx, cmd, pos, o, e); err != nil {
		fmt.Fprintln(e.errOut, "walctl:", err)
		if errors.Is(err, errPending) {
			return exitPending
		}
		return exitFailed
	}
	return exitOK
}

// check reports flag values no command can run with.
func (o options) check() string {
	switch {
	case o.timeout <= 0:
		return fmt.Sprintf("-timeout %s: must be positive", o.timeout)
	case o.last < -1:
		return fmt.Sprintf("-n %d: must be 0 or more", o.last)
	case o.last > maxLast:
		return fmt.Sprintf("-n %d: at most %d", o.last, maxLast)
	case o.last == 0 && o.from != "":
		return "-n 0 (only new messages) and -from contradict each other"
	}
	return ""
}

// execute connects to etcd and runs cmd.
func execute(ctx context.Context, cmd *command, args []string, o options, e env) error {
	layout, err := cluster.NewLayout(o.root)
	if err != nil {
		return err
	}
	if cmd.name != "tail" || o.timeoutGiven {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	if cmd.offline {
		return cmd.run(ctx, &ctl{layout: layout, opts: o, json: o.json, out: e.out, errOut: e.errOut, in: e.in, tty: e.tty}, args)
	}
	creds, err := o.credentials()
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	nodeTLS, err := o.nodeTLS()
	if err != nil {
		return err
	}
	ecfg, err := o.etcdConfig()
	if err != nil {
		return err
	}
	ecfg.Username, ecfg.Password = o.etcdUser, creds.etcdPassword
	cli, err := etcdstore.Dial(dctx, ecfg)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	c := &ctl{cli: cli, layout: layout, opts: o, json: o.json, out: e.out, errOut: e.errOut, in: e.in, tty: e.tty, requested: e.requested,
		token: creds.token, tls: nodeTLS}
	defer c.close()
	return cmd.run(ctx, c, args)
}

// ctl runs one command against a cluster.
type ctl struct {
	cli    *clientv3.Client
	layout cluster.Layout
	opts   options
	json   bool
	out    io.Writer
	errOut io.Writer
	in     io.Reader
	tty    bool
	// requested: env.requested.
	requested func()
	// view follows the cluster while a command waits (made on first use).
	view *cluster.View
	// token is the bearer token for the nodes' API; "" for none.
	token string
	// tls reaches the nodes' API; nil is plaintext.
	tls *tls.Config
	// chainStore reads and changes the channels' chains (made on first
	// use, chains); closers close what it needs.
	chainStore *chain.Store
	// consumerStore reads and changes the consumers' checkpoints (made on
	// first use, checkpoints.go).
	consumerStore *consumers.Store
	closers       []func()
}

func (c *ctl) close() {
	if c.view != nil {
		c.view.Close()
	}
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}
