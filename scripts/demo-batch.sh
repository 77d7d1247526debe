#!/usr/bin/env bash
# The demo batch that make run enqueues: demo data, then friendships,
# renames and money transfers (a few of which cannot apply and are rolled
# back), all through the enqueue command.
# With --more: a small batch, on top of the data already seeded.
set -euo pipefail
cd "$(dirname "$0")/.."
users=20 accounts=10
friendships=40 renames=15 transfers=25
if [ "${1:-}" = "--more" ]; then
	friendships=4 renames=2 transfers=3
else
	bin/enqueue seed --users $users --accounts $accounts --balance 100000 --comments 60
fi

{
	for i in $(seq $friendships); do
		a=$((RANDOM % users + 1)) b=$((RANDOM % users + 1))
		[ "$a" = "$b" ] && continue
		echo "{\"kind\": \"add-friend\", \"args\": {\"userA\": \"u$a\", \"userB\": \"u$b\"}}"
	done
	for i in $(seq $renames); do
		u=$((RANDOM % users + 1))
		echo "{\"kind\": \"rename-user\", \"args\": {\"userId\": \"u$u\", \"newName\": \"user $u v$i\"}}"
	done
} | bin/enqueue batch | wc -l | xargs echo "enqueued add-friend and rename jobs:"

n=0
for i in $(seq $transfers); do
	a=$((RANDOM % accounts + 1)) b=$((RANDOM % accounts + 1))
	[ "$a" = "$b" ] && continue
	amount=$((RANDOM % 20000 + 1))
	# Every fifth asks for more than any account holds: it is rolled back.
	[ $((i % 5)) = 0 ] && amount=10000000
	bin/enqueue transfer --from "a$a" --to "a$b" --amount "$amount" >/dev/null
	n=$((n + 1))
done
echo "enqueued transfer jobs: $n"
