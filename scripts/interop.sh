#!/usr/bin/env bash
# interop.sh — streamwal's Kafka topics as Kafka clients other than franz-go
# see them. It starts a test broker on loopback (internal/cmd/kfakebroker:
# franz-go's kfake), writes channels through the kafka backend
# (internal/cmd/kafkainterop) and checks, failing with a message on any
# mismatch:
#
#  1. kcat (librdkafka), read_committed, partition 0, the log: exactly the
#     acknowledged appends, in offset order, with their payloads (a null and
#     an empty one told apart) and every property as a header, in key order.
#     Another transactional id produced records between them and aborted
#     them: read_uncommitted must show those too, so the first check is
#     known to filter something.
#  2. kafkajs, in a consumer group with readUncommitted false: the same
#     records, and last in partition 1 a term claim ("swc1", the writer's
#     term, a 16-byte nonce).
#  3. Fencing: a kafkajs transactional producer initialises the channel's
#     transactional id (TransactionalIDPrefix + channel, "streamwal-" by
#     default) after a streamwal writer owns the channel. The writer's next
#     append must fail with Kafka's epoch fence. The peer writes no term
#     claim, so the writer's claim still wins: the append after that must
#     succeed on a re-acquired producer, which fences kafkajs in turn, whose
#     transaction must be refused. kcat and kafkajs then see only the
#     acknowledged appends, neither the refused one nor the peer's.
#
#   scripts/interop.sh                     # or: make interop
#   RECORDS=2000 PORT=9092 scripts/interop.sh
#   NODE_DIR=$HOME/.cache/streamwal-interop scripts/interop.sh   # keep kafkajs between runs
#   INTEROP_VERBOSE=1 scripts/interop.sh   # the writers' and kafkajs's logs too
#
# Needs Go, kcat, Node.js with npm and the npm registry: kafkajs is
# installed into a temporary directory (or NODE_DIR), never into the
# repository. Run as root, it installs the Debian packages kcat, nodejs and
# npm when they are missing; otherwise it says what to install. It is not
# part of make test or CI for that reason. The broker, the temporary
# directory and whatever else it started go when it exits, however it exits.
#
# What it does not show:
#  - a real Kafka broker: kfake answers kafkajs's old request versions with
#    PRODUCER_FENCED (error code 90, which kafkajs 2.2.4 does not name),
#    where Kafka answers old clients INVALID_PRODUCER_EPOCH; both count as
#    the epoch fence here. One broker, so no replication either.
#  - the adaptor: the channels are written with the backend itself, so that
#    every record is one acknowledged append and the counts are exact; the
#    adaptor's own messages (term begins, "_" properties) are headers and
#    payloads like any other.
#  - compression: the backend writes none, and kafkajs reads only gzip
#    without extra codecs; a snappy batch in partition 0 would crash it.
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKAJS_VERSION=2.2.4
RECORDS=${RECORDS:-200}
PORT=${PORT:-0}
NODE_DIR=${NODE_DIR:-}
INTEROP_VERBOSE=${INTEROP_VERBOSE:-}
export INTEROP_VERBOSE

tmp=$(mktemp -d /tmp/interop-XXXXXX)
broker_pid=
cleanup() {
	exec 3<&- 2>/dev/null || true
	if [ -n "$broker_pid" ]; then
		kill "$broker_pid" 2>/dev/null || true
		wait "$broker_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
	echo "interop: FAIL: $*" >&2
	exit 1
}

# need COMMAND PACKAGE: the command, from the Debian package when root.
need() {
	command -v "$1" >/dev/null && return
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "== apt-get install $2 (for $1)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >"$tmp/apt.log" 2>&1 ||
			{ apt-get update -qq >>"$tmp/apt.log" 2>&1 &&
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >>"$tmp/apt.log" 2>&1; } ||
			{ cat "$tmp/apt.log" >&2; fail "apt-get could not install $2"; }
	fi
	command -v "$1" >/dev/null ||
		fail "$1 is missing: install it (Debian/Ubuntu: apt-get install $2), or run this script as root"
}

# val PREFIX KEY: a value kafkainterop wrote to PREFIX.env.
val() { sed -n "s/^$2=//p" "$1.env"; }

# run NAME CMD...: CMD's stdout as it comes, its stderr in $tmp/NAME.err,
# shown when it fails (and as it comes with INTEROP_VERBOSE).
run() {
	local name=$1
	shift
	if [ -n "$INTEROP_VERBOSE" ]; then
		"$@" 2> >(tee "$tmp/$name.err" >&2) && return
	else
		"$@" 2>"$tmp/$name.err" && return
	fi
	cat "$tmp/$name.err" >&2
	fail "$name failed (its stderr is above)"
}

echo "== tools"
need kcat kcat
need node nodejs
need npm npm
kcat_version=$(kcat -V 2>&1 | sed -n 's/^Version \([^ ]*\) .*librdkafka \([^ ]*\) .*/\1 (librdkafka \2)/p')
echo "kcat ${kcat_version:-?}, node $(node --version)"

echo "== build"
go build -o "$tmp/bin/kfakebroker" ./internal/cmd/kfakebroker
go build -o "$tmp/bin/kafkainterop" ./internal/cmd/kafkainterop

node_dir=${NODE_DIR:-$tmp/node}
export NODE_PATH=$node_dir/node_modules
if [ "$(node -p "require('kafkajs/package.json').version" 2>/dev/null)" != "$KAFKAJS_VERSION" ]; then
	echo "== npm install kafkajs@$KAFKAJS_VERSION into $node_dir"
	mkdir -p "$node_dir"
	npm install --prefix "$node_dir" --no-save --no-audit --no-fund --loglevel=error "kafkajs@$KAFKAJS_VERSION" \
		>"$tmp/npm.log" 2>&1 || { cat "$tmp/npm.log" >&2; fail "npm could not install kafkajs@$KAFKAJS_VERSION"; }
fi
[ "$(node -p "require('kafkajs/package.json').version")" = "$KAFKAJS_VERSION" ] ||
	fail "node does not load kafkajs $KAFKAJS_VERSION from $NODE_PATH"

# The kafkajs programs. read.js BROKERS TOPIC EXPECTED_TSV LOG_END
# CLAIMS_END TERM consumes TOPIC from the beginning until both partitions
# are read up to their end offsets, compares partition 0 with EXPECTED_TSV
# line by line (kcat's -f '%o\t%S\t%s\t%h\n' form: offset, size or -1 for
# null, payload, headers in record order) and checks partition 1's last
# claim.
mkdir -p "$tmp/js"
cat >"$tmp/js/read.js" <<'EOF'
'use strict'
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const [brokers, topic, expectedPath, logEndS, claimsEndS, termS] = process.argv.slice(2)
const logEnd = BigInt(logEndS), claimsEnd = BigInt(claimsEndS), term = BigInt(termS)
const expected = fs.readFileSync(expectedPath, 'utf8').split('\n').filter(l => l !== '')

function fail(msg) {
  console.error(`kafkajs: ${msg}`)
  process.exit(1)
}

async function main() {
  const kafka = new Kafka({
    clientId: 'streamwal-interop',
    brokers: brokers.split(','),
    logLevel: process.env.INTEROP_VERBOSE ? logLevel.DEBUG : logLevel.ERROR,
  })
  const consumer = kafka.consumer({ groupId: `streamwal-interop-${process.pid}-${topic}`, readUncommitted: false })
  const lines = []
  const claims = []
  // The last offset fetched per partition, markers included: a batch of
  // markers alone reaches END_BATCH_PROCESS but not eachMessage.
  const reached = { 0: -1n, 1: -1n }
  let finish
  const done = new Promise(resolve => { finish = resolve })
  consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
    if (payload.topic !== topic || !(payload.partition in reached) || payload.lastOffset === null) return
    reached[payload.partition] = BigInt(payload.lastOffset)
    if (reached[0] >= logEnd - 1n && reached[1] >= claimsEnd - 1n) finish()
  })
  consumer.on(consumer.events.CRASH, ({ payload }) => fail(`the consumer crashed: ${payload.error}`))
  const timer = setTimeout(() => fail(`timed out after 60s: partition 0 read up to offset ${reached[0]} of ${logEnd}, ` +
    `partition 1 up to ${reached[1]} of ${claimsEnd}; ${lines.length} records`), 60000)
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      if (partition === 0) {
        const hs = Object.keys(message.headers).map(k => `${k}=${message.headers[k].toString('utf8')}`)
        const size = message.value === null ? -1 : message.value.length
        const payload = message.value === null ? '' : message.value.toString('utf8')
        lines.push(`${message.offset}\t${size}\t${payload}\t${hs.join(',')}`)
      } else if (partition === 1) {
        claims.push(message)
      }
    },
  })
  await done
  clearTimeout(timer)
  await consumer.disconnect()

  const diffs = []
  for (let i = 0; i < Math.max(lines.length, expected.length); i++) {
    if (lines[i] !== expected[i]) diffs.push(`  want ${JSON.stringify(expected[i])}\n   got ${JSON.stringify(lines[i])}`)
  }
  if (lines.length !== expected.length) {
    fail(`read ${lines.length} records in partition 0, ${expected.length} appends were acknowledged; first differences:\n${diffs.slice(0, 5).join('\n')}`)
  }
  if (diffs.length) fail(`${diffs.length} of ${lines.length} records differ from what was appended:\n${diffs.slice(0, 5).join('\n')}`)

  if (claims.length === 0) fail('no term claim in partition 1')
  const c = claims[claims.length - 1]
  const key = c.key === null ? null : c.key.toString()
  if (key !== 'streamwal.claim' || c.value === null || c.value.length !== 28 || c.value.toString('latin1', 0, 4) !== 'swc1') {
    fail(`the last record of partition 1 (offset ${c.offset}) is not a term claim: key ${key}, value ${c.value && c.value.toString('hex')}`)
  }
  const claimTerm = c.value.readBigInt64BE(4)
  if (claimTerm !== term) fail(`the last claim (offset ${c.offset}) has term ${claimTerm}; the writer opened at ${term}`)
  console.log(`kafkajs: ${lines.length} of ${expected.length} records, read_committed, as appended; ` +
    `last claim in partition 1 (offset ${c.offset}): term ${claimTerm}`)
}

main().catch(e => fail(e.stack || String(e)))
EOF

# fence.js is kafkainterop fence's peer (see internal/cmd/kafkainterop):
# it initialises the channel's transactional id, prints "initialised",
# waits for "go" on stdin, then must be refused for its epoch.
cat >"$tmp/js/fence.js" <<'EOF'
'use strict'
const readline = require('readline')
const { Kafka, logLevel } = require('kafkajs')

const { INTEROP_BROKERS: brokers, INTEROP_TOPIC: topic, INTEROP_TRANSACTIONAL_ID: txnId } = process.env

// Kafka's epoch fence: INVALID_PRODUCER_EPOCH (47), or PRODUCER_FENCED (90),
// which kafkajs 2.2.4 does not name. kafkajs may wrap the broker's error:
// look through the causes.
function fenceOf(e) {
  for (let c = e; c; c = c.cause || c.originalError) {
    if (c.type === 'INVALID_PRODUCER_EPOCH' || c.type === 'PRODUCER_FENCED') return c.type
    if (c.type === 'KAFKAJS_UNKNOWN_ERROR_CODE' && /\b90\b/.test(c.message)) return 'PRODUCER_FENCED (error code 90)'
  }
  return null
}

async function main() {
  const kafka = new Kafka({
    clientId: 'streamwal-interop-peer',
    brokers: brokers.split(','),
    logLevel: process.env.INTEROP_VERBOSE ? logLevel.DEBUG : logLevel.NOTHING,
  })
  const producer = kafka.producer({ transactionalId: txnId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const txn = await producer.transaction() // InitProducerId of txnId: a new epoch
  console.log('initialised')

  const rl = readline.createInterface({ input: process.stdin })
  const line = await new Promise(resolve => { rl.once('line', resolve); rl.once('close', () => resolve(null)) })
  rl.close()
  if (line !== 'go') throw new Error(`expected "go" on stdin, got ${JSON.stringify(line)}`)

  try {
    await txn.send({ topic, messages: [{ partition: 0, value: `${topic}-kafkajs-stale`, headers: { 'interop.peer': 'kafkajs' } }] })
    await txn.commit()
  } catch (e) {
    const fence = fenceOf(e)
    if (!fence) throw e
    console.log(`fenced by the broker: ${fence}`)
    await producer.disconnect()
    return
  }
  console.error(`kafkajs: the transaction of ${txnId} committed, though the streamwal writer initialised the id after it`)
  process.exit(1)
}

main().catch(e => { console.error(`kafkajs: ${e.stack || e}`); process.exit(1) })
EOF

echo "== broker"
mkfifo "$tmp/broker.fifo"
"$tmp/bin/kfakebroker" -port "$PORT" >"$tmp/broker.fifo" 2>"$tmp/broker.err" &
broker_pid=$!
exec 3<"$tmp/broker.fifo"
addr=
read -r -t 30 addr <&3 || true
[ -n "$addr" ] || fail "the broker printed no address within 30s: $(cat "$tmp/broker.err")"
host=${addr%:*} port=${addr##*:}
(exec 4<>"/dev/tcp/$host/$port") 2>/dev/null || fail "the broker printed $addr but does not accept connections there"
echo "kfake at $addr (pid $broker_pid)"

verbose_flag=()
[ -z "$INTEROP_VERBOSE" ] || verbose_flag=(-v)

# kcat_check PREFIX ISOLATION EXPECTED_TSV: kcat's view of partition 0 of
# PREFIX's topic must be EXPECTED_TSV, line for line.
kcat_check() {
	local prefix=$1 isolation=$2 want=$3 topic got
	topic=$(val "$prefix" TOPIC)
	got="$tmp/kcat.$(basename "$prefix").$isolation.tsv"
	timeout 60 kcat -C -b "$addr" -t "$topic" -p 0 -o beginning -e -q -X "isolation.level=$isolation" \
		-f '%o\t%S\t%s\t%h\n' >"$got" 2>"$got.err" ||
		fail "kcat ($isolation) on $topic failed or took over 60s: $(cat "$got.err")"
	if ! diff -u "$want" "$got" >"$got.diff"; then
		head -n 30 "$got.diff" >&2
		fail "kcat ($isolation) read $(wc -l <"$got") records of $topic partition 0, want the $(wc -l <"$want") above (- want, + got)"
	fi
	echo "kcat: $(wc -l <"$got") of $(wc -l <"$want") records, $isolation, as expected"
}

# kafkajs_check PREFIX: kafkajs's view of PREFIX's topic.
kafkajs_check() {
	local prefix=$1
	timeout 120 node "$tmp/js/read.js" "$addr" "$(val "$prefix" TOPIC)" "$prefix.tsv" \
		"$(val "$prefix" LOG_END)" "$(val "$prefix" CLAIMS_END)" "$(val "$prefix" CHANNEL_TERM)" ||
		fail "kafkajs did not see $(val "$prefix" TOPIC) as written (see above)"
}

echo "== write channel interop-log through the kafka backend"
log=$tmp/log
run write "$tmp/bin/kafkainterop" write "${verbose_flag[@]}" -brokers "$addr" -channel interop-log -term 1 \
	-records "$RECORDS" -out "$log"

echo "== read it with kcat"
kcat_check "$log" read_committed "$log.tsv"
kcat_check "$log" read_uncommitted "$log.uncommitted.tsv"

echo "== read it with kafkajs $KAFKAJS_VERSION"
kafkajs_check "$log"

echo "== fence a streamwal writer with a kafkajs transactional producer"
fence=$tmp/fence
run fence "$tmp/bin/kafkainterop" fence "${verbose_flag[@]}" -brokers "$addr" -channel interop-fence -term 1 -out "$fence" \
	-peer "node $(printf %q "$tmp/js/fence.js")"
kcat_check "$fence" read_committed "$fence.tsv"
kafkajs_check "$fence"

echo "interop: PASS: kcat ${kcat_version:-?} and kafkajs $KAFKAJS_VERSION read $(val "$log" ACKED) acknowledged records" \
	"(and not $(val "$log" ABORTED) aborted ones) as written; a kafkajs producer fenced a streamwal writer by epoch and was fenced back"
