#!/usr/bin/env bash
# make run: docket's demo. Starts devdb (the embedded MongoDB-protocol
# server) unless DOCKET_MONGO_URI is set, two worker processes serving
# their metrics and health probes, the web dashboard, and a demo batch, then
# shows the jobs being processed until Ctrl-C, which stops the workers
# gracefully, the dashboard, and then devdb.
#
# Ports: DOCKET_DEVDB_ADDR (127.0.0.1:27017), DOCKET_DASHBOARD_PORT (8080)
# and DOCKET_METRICS_PORT (9101, then one more per worker). A dashboard or
# metrics port already in use is skipped for the next free one.
set -euo pipefail
cd "$(dirname "$0")/.."

addr=${DOCKET_DEVDB_ADDR:-127.0.0.1:27017}
dashboard_port=${DOCKET_DASHBOARD_PORT:-8080}
metrics_port=${DOCKET_METRICS_PORT:-9101}
pids=()
devdb_pid=
dashboard_pid=

# in_use tells whether something listens on 127.0.0.1:$1.
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port prints the first port from $1 on (at most 50 tried) that
# nothing listens on, and fails when there is none.
free_port() {
	local p=$1
	for _ in $(seq 50); do
		if ! in_use "$p"; then
			echo "$p"
			return 0
		fi
		p=$((p + 1))
	done
	return 1
}

# say prints a line of the demo's own, and never fails: stdout may be a
# pipe whose reader is gone (`make run | tee run.log` after Ctrl-C killed
# tee, `make run | head`), and the cleanup must go on regardless.
say() { printf '%s\n' "$*" 2>/dev/null || true; }

# reap waits until process $1, a child of this shell, has exited: a wait
# that a signal cut short (status over 128, the child still there) is
# waited again, so devdb is never stopped under a worker still finishing
# its jobs. A pid that is no child of ours (127) ends it.
reap() {
	while :; do
		wait "$1" 2>/dev/null
		[ $? -gt 128 ] && kill -0 "$1" 2>/dev/null || return 0
	done
}

# stop ends the demo. Ctrl-C has already sent SIGINT to the workers (they
# share the terminal's process group); a second signal would make them
# cancel their jobs, so they are only signalled when it was not Ctrl-C.
# It survives a closed stdout: SIGPIPE is ignored from its first line and
# nothing in it stops on a failed write, so devdb (in a session of its
# own, which no Ctrl-C reaches) is always stopped.
stop() {
	trap - INT TERM EXIT
	trap '' PIPE
	set +e
	say
	say "== stopping workers (they finish or release their jobs) =="
	if [ "$1" != INT ]; then
		for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	fi
	for p in "${pids[@]}"; do reap "$p"; done
	if [ -n "$dashboard_pid" ]; then
		[ "$1" != INT ] && kill -TERM "$dashboard_pid" 2>/dev/null
		reap "$dashboard_pid"
	fi
	bin/docketctl stats 2>/dev/null
	if [ -n "$devdb_pid" ]; then
		say "== stopping devdb =="
		kill -TERM "$devdb_pid" 2>/dev/null
		wait "$devdb_pid" 2>/dev/null
	fi
	exit 0
}

host=${addr%:*} port=${addr##*:}
if [ -z "${DOCKET_MONGO_URI:-}" ] && (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
	echo "make run: $addr is already in use. Stop what listens there, or set DOCKET_DEVDB_ADDR=127.0.0.1:PORT," >&2
	echo "or point docket at a running server with DOCKET_MONGO_URI=mongodb://..." >&2
	exit 1
fi

# From here every way out goes through stop: Ctrl-C, SIGTERM, an error, and
# a write to a closed stdout (the reader of `make run | ...` gone), which
# would otherwise kill this script and leave devdb and the workers running.
trap "stop PIPE" PIPE
trap "stop TERM" TERM EXIT
trap "stop INT" INT

if [ -z "${DOCKET_MONGO_URI:-}" ]; then
	mkdir -p .docket/data
	echo "== starting devdb on $addr (data in .docket/data) =="
	# Its own session: Ctrl-C reaches the workers first, devdb last.
	setsid bin/devdb --addr "$addr" --dir .docket/data --log-format console &
	devdb_pid=$!
	export DOCKET_MONGO_URI="mongodb://$addr"
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && break
		sleep 0.1
	done
fi

echo "== starting two workers =="
metrics_urls=()
next=$metrics_port
for i in 1 2; do
	if port=$(free_port "$next"); then
		[ "$port" != "$next" ] && echo "make run: port $next is in use; worker $i's metrics take $port" >&2
		bin/worker --log-format console --concurrency 4 --http-addr "127.0.0.1:$port" &
		metrics_urls+=("worker $i: http://127.0.0.1:$port/metrics  (probes: /healthz, /readyz)")
		next=$((port + 1))
	else
		echo "make run: no free port from $next for worker $i's metrics; it runs without them" >&2
		bin/worker --log-format console --concurrency 4 &
	fi
	pids+=($!)
done

dashboard_url=
if port=$(free_port "$dashboard_port"); then
	[ "$port" != "$dashboard_port" ] && echo "make run: port $dashboard_port is in use; the dashboard takes $port" >&2
	DOCKET_LOG_FORMAT=console bin/docketctl dashboard --addr "127.0.0.1:$port" >/dev/null &
	dashboard_pid=$!
	for _ in $(seq 100); do
		in_use "$port" && break
		kill -0 "$dashboard_pid" 2>/dev/null || break
		sleep 0.1
	done
	if in_use "$port"; then
		dashboard_url="http://127.0.0.1:$port/"
	else
		echo "make run: the dashboard did not start (see its message above); the demo goes on without it" >&2
		dashboard_pid=
	fi
else
	echo "make run: no free port from $dashboard_port for the dashboard; the demo goes on without it" >&2
fi

urls() {
	[ -n "$dashboard_url" ] && echo "dashboard: $dashboard_url"
	for u in "${metrics_urls[@]}"; do echo "metrics, $u"; done
	return 0
}
echo "== serving =="
urls

echo "== enqueueing the demo batch =="
scripts/demo-batch.sh

echo "== processing; a few more jobs every 10 s; Ctrl-C to stop =="
urls
while true; do
	sleep 10
	scripts/demo-batch.sh --more >/dev/null || true
	bin/docketctl stats || true
	urls
done
