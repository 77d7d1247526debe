#!/usr/bin/env bash
# make run: docket's demo. Starts devdb (the embedded MongoDB-protocol
# server) unless DOCKET_MONGO_URI is set, two worker processes, and a demo
# batch, then shows the jobs being processed until Ctrl-C, which stops the
# workers gracefully and then devdb.
set -euo pipefail
cd "$(dirname "$0")/.."

addr=${DOCKET_DEVDB_ADDR:-127.0.0.1:27017}
pids=()
devdb_pid=

# stop ends the demo. Ctrl-C has already sent SIGINT to the workers (they
# share the terminal's process group); a second signal would make them
# cancel their jobs, so they are only signalled when it was not Ctrl-C.
stop() {
	trap - INT TERM EXIT
	echo
	echo "== stopping workers (they finish or release their jobs) =="
	if [ "$1" != INT ]; then
		for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	fi
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	bin/docketctl stats 2>/dev/null || true
	if [ -n "$devdb_pid" ]; then
		echo "== stopping devdb =="
		kill -TERM "$devdb_pid" 2>/dev/null || true
		wait "$devdb_pid" 2>/dev/null || true
	fi
	exit 0
}

if [ -z "${DOCKET_MONGO_URI:-}" ]; then
	host=${addr%:*} port=${addr##*:}
	if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
		echo "make run: $addr is already in use. Stop what listens there, or set DOCKET_DEVDB_ADDR=127.0.0.1:PORT," >&2
		echo "or point docket at a running server with DOCKET_MONGO_URI=mongodb://..." >&2
		exit 1
	fi
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
trap "stop INT" INT
trap "stop TERM" TERM EXIT

echo "== starting two workers =="
for i in 1 2; do
	bin/worker --log-format console --concurrency 4 &
	pids+=($!)
done

echo "== enqueueing the demo batch =="
scripts/demo-batch.sh

echo "== processing; a few more jobs every 10 s; Ctrl-C to stop =="
while true; do
	sleep 10
	scripts/demo-batch.sh --more >/dev/null || true
	bin/docketctl stats || true
done
