#!/bin/sh
# Prints the path of a Go workspace file (for GOWORK=...) that builds the
# devdb module with FerretDB's SQLite collection replaced by
# _overlay/sqlite_collection.go, whose queries push down _id lookups and
# string equalities wherever they stand in a filter (see its header).
#
# Go does not let a build overlay replace files in the module cache, so the
# script copies FerretDB's module (3.4 MB) from the cache to
# _overlay/ferretdb once, puts the file in, and writes _overlay/go.work with
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
if [ ! -f "$copy/.version" ] || [ "$(cat "$copy/.version")" != "$version" ] ||
	! cmp -s "$here/sqlite_collection.go" "$copy/internal/backends/sqlite/collection.go"; then
	dir=$(GOWORK=off "$GO" mod download -json "github.com/FerretDB/FerretDB@$version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [ -z "$dir" ] || [ ! -f "$dir/internal/backends/sqlite/collection.go" ]; then
		echo "workspace.sh: FerretDB $version not found in the module cache" >&2
		exit 1
	fi
	tmp=$(mktemp -d "$here/.ferretdb.XXXXXX")
	cp -R "$dir/." "$tmp/"
	chmod -R u+w "$tmp"
	cp "$here/sqlite_collection.go" "$tmp/internal/backends/sqlite/collection.go"
	echo "$version" >"$tmp/.version"
	rm -rf "$copy"
	mv "$tmp" "$copy"
fi
work=$(mktemp "$here/.go.work.XXXXXX")
goversion=$(sed -n 's/^go \(.*\)$/\1/p' go.mod)
printf 'go %s\n\nuse ..\n\nreplace github.com/FerretDB/FerretDB %s => ./ferretdb\n' "$goversion" "$version" >"$work"
mv -f "$work" "$here/go.work"
echo "$here/go.work"
