#!/usr/bin/env bash
# One `tagstore serve` run: a fresh store, N SADDs from redis-benchmark
# (-c 50, keys over 100,000 objects and subjects), then the server's own CPU
# seconds (user + system, from /proc). For A/B runs of two builds:
#   for r in 1 2 3 4 5 6; do for b in old new; do
#     echo "$r $b $(benches/serve_cpu.sh /tmp/tagstore-$b 100000 16 immediate)"; done; done
# Usage: [CREATE_ARGS="--expected-tags N"] [HALF_ONLY=1] benches/serve_cpu.sh BIN N PIPELINE [DURABILITY]
# HALF_ONLY=1: the node is half-only (serve creates it), as behind a proxy.
# Prints: requests/s, then "cpu" and the server's CPU seconds.
set -euo pipefail
bin=$1 n=$2 p=$3 d=${4:-immediate}
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
half=()
if [ -n "${HALF_ONLY:-}" ]; then half=(--half-only); else "$bin" create "$w/t.tags" ${CREATE_ARGS:-} >/dev/null; fi
"$bin" serve "$w/t.tags" --listen 127.0.0.1:0 --durability "$d" "${half[@]}" >"$w/out" 2>&1 &
pid=$!
until grep -q listening "$w/out" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || { cat "$w/out" >&2; exit 1; }
  sleep 0.02
done
port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$w/out")
rps=$(redis-benchmark -p "$port" -c 50 -n "$n" -r 100000 -P "$p" --csv \
  SADD o:5:photo:obj__rand_int__ subj__rand_int__ 2>/dev/null | tail -1 | cut -d, -f2)
cpu=$(awk '{print ($14 + $15) / 100}' "/proc/$pid/stat")
kill "$pid"
wait "$pid" 2>/dev/null || true
echo "$rps cpu $cpu"
