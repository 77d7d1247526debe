#!/usr/bin/env bash
# scripts/test-mongo.sh [--allow-standalone] URI [go test arguments]
#
# Runs docket's tests under the race detector against the real MongoDB
# replica set at URI (DOCKET_TEST_MONGO_URI, which internal/testdb honours:
# each test makes a database of its own, named after it, and drops it). It
# first checks that the server answers, is a replica set (or a sharded
# cluster's mongos) and lets this user create and drop databases, and
# refuses a standalone server, devdb included, unless --allow-standalone.
# Afterwards it lists the tests that skipped and why: those that run on a
# devdb of their own (outages, the chaos run, the bench) skip here, since
# `make test` runs them.
#
# The arguments after URI go to go test in place of ./... (docket's module;
# the devdb module is the embedded server itself and is not run):
#
#   scripts/test-mongo.sh 'mongodb://localhost:27017/?replicaSet=rs0'
#   scripts/test-mongo.sh "$URI" -run TestHarness ./handlers/
#
# Exit status: 2 for a usage error, 1 when the server is refused or a test
# fails, 0 otherwise.
set -uo pipefail

usage() {
	echo "usage: scripts/test-mongo.sh [--allow-standalone] mongodb://HOST[:PORT][,HOST…]/?replicaSet=NAME [go test arguments, default ./...]" >&2
	exit 2
}

check_flags=()
while [[ $# -gt 0 ]]; do
	case $1 in
	--allow-standalone) check_flags+=(--allow-standalone); shift ;;
	-h | --help) usage ;;
	--) shift; break ;;
	-*) echo "test-mongo: unknown flag $1" >&2; usage ;;
	*) break ;;
	esac
done
[[ $# -ge 1 ]] || { echo "test-mongo: no URI given" >&2; usage; }
uri=$1
shift
case $uri in
mongodb://?* | mongodb+srv://?*) ;;
*)
	shown=$uri # its user info hidden: a password is never shown
	if [[ $uri == *@* ]]; then
		if [[ $uri == *://* ]]; then shown="${uri%%://*}://***@${uri##*@}"; else shown="***@${uri##*@}"; fi
	fi
	echo "test-mongo: $shown is not a MongoDB connection string (mongodb://… or mongodb+srv://…)" >&2
	usage
	;;
esac

cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

"$GO" build -o "$tmp/realmongo" ./cmd/internal/realmongo || exit 1
"$tmp/realmongo" check ${check_flags[@]+"${check_flags[@]}"} "$uri" || exit 1

[[ $# -gt 0 ]] || set -- ./...
DOCKET_TEST_MONGO_URI=$uri "$GO" test -race -timeout 20m -json "$@" | DOCKET_TEST_MONGO_URI=$uri "$tmp/realmongo" report
status=("${PIPESTATUS[@]}")
if [[ ${status[0]} -ne 0 || ${status[1]} -ne 0 ]]; then
	echo "test-mongo: FAIL (go test exited ${status[0]})" >&2
	exit 1
fi
echo "test-mongo: ok"
