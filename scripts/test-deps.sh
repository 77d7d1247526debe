#!/usr/bin/env bash
# Installs what the tests need beyond Go, from Debian's packages: python3-pymongo
# (the test that enqueues from another language) and chromium with
# chromium-driver (the dashboard's browser tests). Does nothing when they are
# there.
set -euo pipefail
need=()
/usr/bin/python3 -c 'import pymongo' 2>/dev/null || need+=(python3-pymongo)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
echo "installing ${need[*]} (for the cross-language and browser tests)..."
sudo=
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo=sudo
	else
		echo "make test needs Debian's ${need[*]}: run 'sudo apt-get install ${need[*]}'" >&2
		exit 1
	fi
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
