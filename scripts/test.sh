#!/usr/bin/env bash
# make test: every test of both modules under the race detector — docket's
# own and the devdb module's (the embedded server, kept apart so that
# docket's module graph holds no FerretDB) — run side by side, as go test
# would run their packages. Fails if either fails.
set -uo pipefail
GO=${GO:-go}
"$GO" test -race -timeout 20m ./... &
docket=$!
# devdb with its pushdown (devdb/_overlay), as make build builds it.
(cd devdb && work=$(GO="$GO" _overlay/workspace.sh) && GOWORK="$work" "$GO" test -race -timeout 20m ./...) &
devdb=$!
rc=0
wait "$docket" || rc=1
wait "$devdb" || rc=1
exit "$rc"
