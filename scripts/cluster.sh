#!/usr/bin/env bash
# cluster.sh — a three-node streamwal cluster on this machine, for trying
# the cluster mode: one etcd member embedded in n1, an in-memory
# Kafka-protocol broker run by n1 (for trying only: its data lives in n1's
# process), and three walnode processes sharing both.
#
#   scripts/cluster.sh up            # build, start n1, n2, n3; wait until each serves
#   scripts/cluster.sh status        # which nodes run (pid, API address)
#   scripts/cluster.sh kill n2       # kill -9 the real walnode process of n2
#   scripts/cluster.sh start n2      # start n2 again (same ID and data)
#   scripts/cluster.sh stop n2       # SIGTERM: a graceful stop (its channels move at once)
#   scripts/cluster.sh down          # stop every node, keep the state directory
#   scripts/cluster.sh clean         # down, then remove the state directory
#
# walctl talks to the cluster with its defaults (etcd at 127.0.0.1:2379):
#
#   bin/walctl nodes; bin/walctl channels; bin/walctl append pch-0 hello
#
# State (binaries' logs, pids, data) lives in $CLUSTER_DIR (default
# ./streamwal-cluster); the binaries are built into ./bin. Needs only Go.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER_DIR=${CLUSTER_DIR:-./streamwal-cluster}
ETCD=127.0.0.1:2379
KAFKA=127.0.0.1:9092
TTL=${SESSION_TTL:-3s}
NODES=(n1 n2 n3)

api() { # the API address of node $1
	case $1 in n1) echo 127.0.0.1:7071 ;; n2) echo 127.0.0.1:7072 ;; n3) echo 127.0.0.1:7073 ;;
	*) echo "cluster.sh: unknown node $1 (n1, n2 or n3)" >&2; exit 2 ;; esac
}

pidof_node() { # the pid of node $1 if it runs, else nothing
	local f="$CLUSTER_DIR/$1.pid"
	[[ -f $f ]] || return 0
	local pid
	pid=$(<"$f")
	if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}

build() {
	mkdir -p bin
	go build -o bin/walnode ./cmd/walnode
	go build -o bin/walctl ./cmd/walctl
}

start() { # start node $1 and wait until it serves
	local id=$1 addr
	addr=$(api "$id")
	if [[ -n $(pidof_node "$id") ]]; then
		echo "$id already runs (pid $(pidof_node "$id"))"
		return
	fi
	mkdir -p "$CLUSTER_DIR"
	local args=(-id "$id" -listen "$addr" -data "$CLUSTER_DIR/$id" -session-ttl "$TTL")
	if [[ $id == n1 ]]; then
		args+=(-dev-kafka "$KAFKA" -etcd-listen "$ETCD")
	else
		args+=(-etcd "http://$ETCD" -kafka "$KAFKA")
	fi
	# exec: the pid recorded is walnode's own, so that kill reaches it.
	bash -c 'exec "$0" "$@"' bin/walnode "${args[@]}" >"$CLUSTER_DIR/$id.log" 2>&1 &
	echo $! >"$CLUSTER_DIR/$id.pid"
	for _ in $(seq 1 300); do
		if grep -q "serving on" "$CLUSTER_DIR/$id.log"; then
			echo "$id serving on $addr (pid $(<"$CLUSTER_DIR/$id.pid"), log $CLUSTER_DIR/$id.log)"
			return
		fi
		if [[ -z $(pidof_node "$id") ]]; then
			echo "cluster.sh: $id exited; its log ($CLUSTER_DIR/$id.log) ends with:" >&2
			tail -n 5 "$CLUSTER_DIR/$id.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "cluster.sh: $id did not serve within 30s; see $CLUSTER_DIR/$id.log" >&2
	exit 1
}

stop() { # SIGTERM node $1 and wait for it to exit
	local pid
	pid=$(pidof_node "$1")
	[[ -n $pid ]] || { echo "$1 is not running"; return; }
	kill -TERM "$pid"
	for _ in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || { echo "$1 stopped"; rm -f "$CLUSTER_DIR/$1.pid"; return; }
		sleep 0.1
	done
	echo "cluster.sh: $1 (pid $pid) still runs after 30s; kill -9 it with: scripts/cluster.sh kill $1" >&2
	exit 1
}

case ${1:-} in
up)
	build
	for id in "${NODES[@]}"; do start "$id"; done
	echo "walctl: bin/walctl nodes | channels | append <channel> <text>... | tail <channel>"
	;;
start) [[ -n ${2:-} ]] || { echo "usage: cluster.sh start <node>" >&2; exit 2; }; api "$2" >/dev/null; start "$2" ;;
stop) [[ -n ${2:-} ]] || { echo "usage: cluster.sh stop <node>" >&2; exit 2; }; api "$2" >/dev/null; stop "$2" ;;
kill)
	[[ -n ${2:-} ]] || { echo "usage: cluster.sh kill <node>" >&2; exit 2; }
	api "$2" >/dev/null
	pid=$(pidof_node "$2")
	[[ -n $pid ]] || { echo "$2 is not running"; exit 1; }
	kill -9 "$pid"
	rm -f "$CLUSTER_DIR/$2.pid"
	echo "$2 (pid $pid) killed with SIGKILL"
	;;
status)
	for id in "${NODES[@]}"; do
		pid=$(pidof_node "$id")
		if [[ -n $pid ]]; then echo "$id running, pid $pid, API $(api "$id")"; else echo "$id not running"; fi
	done
	;;
down)
	# n1 last: it holds the etcd member and the broker the others use.
	for id in n3 n2 n1; do stop "$id"; done
	;;
clean)
	for id in n3 n2 n1; do stop "$id"; done
	rm -rf "$CLUSTER_DIR"
	echo "removed $CLUSTER_DIR"
	;;
*)
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
