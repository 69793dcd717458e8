#!/usr/bin/env bash
# Three nodes behind nutcracker (twemproxy): `tagstore serve --half-only`
# nodes (what a cluster runs) against redis-server nodes, redis-benchmark
# through the proxy, the two alternating. The proxy config is the same for
# both: hash md5, distribution ketama, auto_eject_hosts false.
# Usage: benches/cluster_vs_redis.sh ROUNDS MODE
#   MODE fast:    tagstore --durability none      vs redis persistence off
#   MODE durable: tagstore --durability immediate vs redis appendonly yes, appendfsync always
# Prints one CSV line per run: mode,server,pipeline,test,rps,avg,min,p50,p95,p99,max
# Needs: target/release/tagstore (or $TAGSTORE), redis-server, redis-cli,
# redis-benchmark, nutcracker. REQUESTS=N sets the requests per test
# (200,000 fast, 20,000 durable).
set -euo pipefail
rounds=${1:-3}
mode=${2:-fast}
bin=${TAGSTORE:-target/release/tagstore}
work=$(mktemp -d)
pids=()
stop_all() {
  local q
  for q in "${pids[@]}"; do kill -TERM "$q" 2>/dev/null || true; done
  for q in "${pids[@]}"; do wait "$q" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT
if [ "$mode" = fast ]; then n=200000; else n=20000; fi
n=${REQUESTS:-$n}
ports=()

start_tagstore_nodes() { # durability
  ports=()
  for i in 0 1 2; do
    rm -f "$work"/t$i.tags* "$work/t$i.out"
    "$bin" serve "$work/t$i.tags" --half-only --listen 127.0.0.1:0 --durability "$1" \
      >"$work/t$i.out" 2>/dev/null &
    pids+=($!)
    until grep -q listening "$work/t$i.out" 2>/dev/null; do sleep 0.05; done
    ports+=("$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$work/t$i.out")")
  done
}

start_redis_nodes() { # extra redis options...
  ports=()
  for i in 0 1 2; do
    rm -rf "$work/r$i" && mkdir "$work/r$i"
    # A random port may be taken: a server that exits at once is started
    # again on another one.
    while :; do
      local port=$((20000 + RANDOM % 20000))
      redis-server --port "$port" --dir "$work/r$i" --save "" "$@" >/dev/null &
      local pid=$!
      until redis-cli -p "$port" PING >/dev/null 2>&1 || ! kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
      if kill -0 "$pid" 2>/dev/null; then
        pids+=("$pid")
        ports+=("$port")
        break
      fi
    done
  done
}

# Starts nutcracker in front of "${ports[@]}"; sets PROXY.
start_proxy() {
  while :; do
    PROXY=$((20000 + RANDOM % 20000))
    local stats=$((20000 + RANDOM % 20000))
    {
      echo "tags:"
      echo "  listen: 127.0.0.1:$PROXY"
      echo "  hash: md5"
      echo "  distribution: ketama"
      echo "  auto_eject_hosts: false"
      echo "  redis: true"
      echo "  servers:"
      for i in 0 1 2; do echo "   - 127.0.0.1:${ports[$i]}:1 n$i"; done
    } >"$work/proxy.yml"
    nutcracker -c "$work/proxy.yml" -s "$stats" -a 127.0.0.1 -o "$work/proxy.log" &
    local pid=$!
    # Ready when a set command goes through it to a node.
    local t=0
    until [ "$(redis-cli -p "$PROXY" SCARD o:1:x:probe 2>/dev/null)" = 0 ]; do
      kill -0 "$pid" 2>/dev/null || break
      t=$((t + 1)); [ $t -gt 100 ] && break
      sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null && [ $t -le 100 ]; then
      pids+=("$pid")
      return
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

bench() { # label pipeline
  local label=$1 p=$2
  echo "$(date -u +%T) $label -P $p" >&2
  redis-benchmark -p "$PROXY" -c 50 -n "$n" -r 100000 -P "$p" --csv \
    SADD o:5:photo:obj__rand_int__ subj__rand_int__ 2>/dev/null | tail -1 |
    sed "s/^\"[^\"]*\"/$label,$p,SADD/"
  if [ "$mode" = fast ]; then
    redis-benchmark -p "$PROXY" -c 50 -n "$n" -r 100000 -P "$p" --csv \
      SMEMBERS o:5:photo:obj__rand_int__ 2>/dev/null | tail -1 |
      sed "s/^\"[^\"]*\"/$label,$p,SMEMBERS/"
  fi
}

for r in $(seq "$rounds"); do
  for pipe in 1 16; do
    if [ "$mode" = fast ]; then
      start_tagstore_nodes none; start_proxy; bench "$mode,tagstore-3-half-only" "$pipe"; stop_all
      start_redis_nodes --appendonly no; start_proxy; bench "$mode,redis-3-nopersist" "$pipe"; stop_all
    else
      start_tagstore_nodes immediate; start_proxy; bench "$mode,tagstore-3-immediate" "$pipe"; stop_all
      start_redis_nodes --appendonly yes --appendfsync always; start_proxy
      bench "$mode,redis-3-aof-always" "$pipe"; stop_all
    fi
  done
done
