#!/bin/sh
# Prints the path of a Go workspace file (for GOWORK=...) that builds the
# devdb module with eleven of FerretDB's files replaced and four added: its SQLite collection
# by _overlay/sqlite_collection.go, whose queries push down _id lookups,
# string equalities, $in of strings and $exists: true wherever they stand
# in a filter (the last with _overlay/sqlite_exists.go, added), and
# apply a limited find's sort (orderByIndex, querySorted); its find and
# findAndModify commands and backend interface by _overlay/handler_msg_find.go,
# handler_msg_findandmodify.go and backends_collection.go, which pass that
# sort down; and its update command by
# _overlay/handler_msg_update.go, which closes each statement's query when
# the statement is done; and its SQL transaction wrapper by
# _overlay/fsql_tx.go, which can prepare a statement, beside
# _overlay/fsql_stmt.go, which keeps the statements of the sorted reads
# and of updates prepared; and its resource
# tracker by _overlay/resource.go, which takes no stack trace per object
# outside debug builds; and its document decoder by _overlay/sjson.go, which
# first tries the one-pass decoder that _overlay/sjson_fast.go adds as
# internal/handler/sjson/fast.go, with its test; and its SQLite index
# creation by _overlay/sqlite_metadata_registry.go, which makes each index
# partial; and its filters by _overlay/handler_common_filter.go, whose
# $elemMatch of operators tests each element as MongoDB's does; and its
# array updates by _overlay/handler_common_update_array_operators.go, whose
# $pullAll of strings takes one pass over the array (see their headers).
#
# Go does not let a build overlay replace files in the module cache, so the
# script copies FerretDB's module (3.4 MB) from the cache to
# _overlay/ferretdb once, puts the files in, and writes _overlay/go.work with
# a replace directive to that copy. Without it, devdb builds and runs the
# same, only its queries read every document of a collection.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
GO=${GO:-go}
version=$(sed -n 's/^[[:space:]]*github.com\/FerretDB\/FerretDB \(v[^ ]*\).*$/\1/p' go.mod)
copy="$here/ferretdb"
# One copy at a time: make test builds devdb from two test processes.
exec 9>"$here/.lock"
flock 9
# The files devdb replaces: this directory's file, then its place in FerretDB.
patches="sqlite_collection.go internal/backends/sqlite/collection.go
sqlite_exists.go internal/backends/sqlite/exists.go
handler_msg_update.go internal/handler/msg_update.go
backends_collection.go internal/backends/collection.go
handler_msg_find.go internal/handler/msg_find.go
handler_msg_findandmodify.go internal/handler/msg_findandmodify.go
fsql_tx.go internal/util/fsql/tx.go
resource.go internal/util/resource/resource.go
sjson.go internal/handler/sjson/sjson.go
sjson_fast.go internal/handler/sjson/fast.go
sjson_fast_test.go internal/handler/sjson/fast_test.go
fsql_stmt.go internal/util/fsql/stmt.go
sqlite_metadata_registry.go internal/backends/sqlite/metadata/registry.go
handler_common_filter.go internal/handler/common/filter.go
handler_common_update_array_operators.go internal/handler/common/update_array_operators.go"
stale=false
if [ ! -f "$copy/.version" ] || [ "$(cat "$copy/.version")" != "$version" ]; then
	stale=true
else
	while read -r file target; do
		cmp -s "$here/$file" "$copy/$target" || stale=true
	done <<EOP
$patches
EOP
fi
if $stale; then
	dir=$(GOWORK=off "$GO" mod download -json "github.com/FerretDB/FerretDB@$version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [ -z "$dir" ] || [ ! -f "$dir/internal/backends/sqlite/collection.go" ]; then
		echo "workspace.sh: FerretDB $version not found in the module cache" >&2
		exit 1
	fi
	tmp=$(mktemp -d "$here/.ferretdb.XXXXXX")
	cp -R "$dir/." "$tmp/"
	chmod -R u+w "$tmp"
	while read -r file target; do
		cp "$here/$file" "$tmp/$target"
	done <<EOP
$patches
EOP
	echo "$version" >"$tmp/.version"
	rm -rf "$copy"
	mv "$tmp" "$copy"
fi
work=$(mktemp "$here/.go.work.XXXXXX")
goversion=$(sed -n 's/^go \(.*\)$/\1/p' go.mod)
printf 'go %s\n\nuse ..\n\nreplace github.com/FerretDB/FerretDB %s => ./ferretdb\n' "$goversion" "$version" >"$work"
mv -f "$work" "$here/go.work"
echo "$here/go.work"
