#!/usr/bin/env bash
# tagstore serve against redis-server with redis-benchmark, runs alternated.
# Usage: benches/serve_vs_redis.sh ROUNDS MODE
#   MODE fast:    tagstore --durability none      vs redis persistence off
#   MODE durable: tagstore --durability immediate vs redis appendonly yes, appendfsync always
#                 (and tagstore --durability on-sync)
#   MODE bigset:  SMEMBERS of one set of $MEMBERS members (10,000 by default),
#                 tagstore --durability none (hot copies on, its default) and
#                 --hot-bytes 0 vs redis persistence off; 2,000 requests a test
# Prints one CSV line per run: mode,server,pipeline,test,rps,avg,min,p50,p95,p99,max
# Needs: target/release/tagstore (or $TAGSTORE), redis-server, redis-benchmark.
# HALF_ONLY=1: the tagstore node is half-only (`serve --half-only`: a SADD
# stores the half its key names, as Redis stores only the set named; a
# whole-tag node stores both halves, so `SMEMBERS s:…` sees an `o:` SADD).
# CREATE_ARGS="--expected-tags N": the tagstore node's store is created
# sized (default: `serve` grows it from empty).
set -euo pipefail
rounds=${1:-3}
mode=${2:-fast}
bin=${TAGSTORE:-target/release/tagstore}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case "$mode" in
  fast) n=200000 ;;
  bigset) n=2000 ;;
  *) n=20000 ;;
esac
members=${MEMBERS:-10000}
n=${REQUESTS:-$n} # REQUESTS=N overrides the requests per test

# Each start sets PID and PORT (run in this shell, so that stop can wait).
start_tagstore() { # durability [serve options...]
  local durability=$1
  shift
  rm -f "$work"/t.tags* "$work/t.out"
  local half=()
  if [ -n "${HALF_ONLY:-}" ] && [ -z "${CREATE_ARGS:-}" ]; then
    half=(--half-only) # serve creates it
  else
    "$bin" create "$work/t.tags" ${HALF_ONLY:+--half-only} ${CREATE_ARGS:-} >/dev/null
  fi
  "$bin" serve "$work/t.tags" --listen 127.0.0.1:0 --durability "$durability" "${half[@]}" "$@" >"$work/t.out" 2>/dev/null &
  PID=$!
  until grep -q listening "$work/t.out" 2>/dev/null; do sleep 0.05; done
  PORT=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$work/t.out")
}
start_redis() { # extra redis options...
  rm -rf "$work/r" && mkdir "$work/r"
  # A random port may be taken: a server that exits at once is started
  # again on another one.
  while :; do
    PORT=$((20000 + RANDOM % 20000))
    redis-server --port "$PORT" --dir "$work/r" --save "" "$@" >/dev/null &
    PID=$!
    until redis-cli -p "$PORT" PING >/dev/null 2>&1 || ! kill -0 "$PID" 2>/dev/null; do sleep 0.05; done
    kill -0 "$PID" 2>/dev/null && return
  done
}
bench() { # label port pipeline
  local label=$1 port=$2 p=$3
  echo "$(date -u +%T) $label -P $p" >&2
  redis-benchmark -p "$port" -c 50 -n "$n" -r 100000 -P "$p" --csv \
    SADD o:5:photo:obj__rand_int__ subj__rand_int__ | tail -1 | sed "s/^\"[^\"]*\"/$label,$p,SADD/"
  if [ "$mode" = fast ]; then
    redis-benchmark -p "$port" -c 50 -n "$n" -r 100000 -P "$p" --csv \
      SMEMBERS o:5:photo:obj__rand_int__ | tail -1 | sed "s/^\"[^\"]*\"/$label,$p,SMEMBERS/"
  fi
}
stop() { kill -TERM "$PID"; wait "$PID" || true; }
# One set of $members members, SADDed in pieces of 1,000, then SMEMBERS of it.
bench_bigset() { # label port
  local label=$1 port=$2 i
  for ((i = 0; i < members; i += 1000)); do
    seq "$i" $((i + 999 < members - 1 ? i + 999 : members - 1)) | sed 's/^/member-/' |
      xargs redis-cli -p "$port" SADD s:5:photo:big >/dev/null
  done
  echo "$(date -u +%T) $label SMEMBERS of $members" >&2
  redis-benchmark -p "$port" -c 50 -n "$n" -P 1 --csv \
    SMEMBERS s:5:photo:big | tail -1 | sed "s/^\"[^\"]*\"/$label,1,SMEMBERS-$members/"
}

if [ "$mode" = bigset ]; then
  for r in $(seq "$rounds"); do
    start_tagstore none; bench_bigset "$mode,tagstore-hot" "$PORT"; stop
    start_tagstore none --hot-bytes 0; bench_bigset "$mode,tagstore-no-hot" "$PORT"; stop
    start_redis --appendonly no; bench_bigset "$mode,redis-nopersist" "$PORT"; stop
  done
  exit 0
fi
for r in $(seq "$rounds"); do
  for p in 1 16; do
    if [ "$mode" = fast ]; then
      start_tagstore none; bench "$mode,tagstore-none" "$PORT" "$p"; stop
      start_redis --appendonly no; bench "$mode,redis-nopersist" "$PORT" "$p"; stop
    else
      start_tagstore immediate; bench "$mode,tagstore-immediate" "$PORT" "$p"; stop
      start_redis --appendonly yes --appendfsync always; bench "$mode,redis-aof-always" "$PORT" "$p"; stop
      start_tagstore on-sync; bench "$mode,tagstore-on-sync" "$PORT" "$p"; stop
    fi
  done
done
