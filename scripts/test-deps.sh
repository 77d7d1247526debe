#!/usr/bin/env bash
# Installs what the tests need beyond Go: Debian's python3-pymongo, for the
# test that enqueues from another language. Does nothing when it is there.
set -euo pipefail
if /usr/bin/python3 -c 'import pymongo' 2>/dev/null; then
	exit 0
fi
echo "installing python3-pymongo (for the cross-language enqueue test)..."
sudo=
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo=sudo
	else
		echo "make test needs Debian's python3-pymongo: run 'sudo apt-get install python3-pymongo'" >&2
		exit 1
	fi
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-pymongo >/dev/null
