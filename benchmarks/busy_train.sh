#!/bin/bash
# Issue 28's loaded machine: two busy loops (started here, stopped at the end), the same 100-epoch
# `attnlab train` before (BEFORE_SRC, e.g. a checkout of cefd342) and after (this tree), with uptime at each.
# Run: benchmarks/busy_train.sh BEFORE_SRC > benchmarks/results/investigations/busy_train.log
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
BEFORE=$1
PY=${PYTHON:-python}
OUT=$(mktemp -d)
run() { # name src
  echo "== $1 start $(date +%T) $(uptime)"
  s=$(date +%s.%N)
  PYTHONPATH=$2 MPLBACKEND=Agg timeout $3 $PY -m attnlab train --out $OUT/$1 --device cpu --no-progress > $OUT/$1.out 2>&1
  rc=$?
  e=$(date +%s.%N)
  echo "== $1 rc=$rc wall=$(echo "$e - $s" | bc) s end $(date +%T) $(uptime)"
  tail -2 $OUT/$1.out
}
run after-quiet $HERE/src 600
(while :; do :; done) & B1=$!
(while :; do :; done) & B2=$!
echo "busy loops $B1 $B2"
sleep 5
run after-busy-1 $HERE/src 600
run after-busy-2 $HERE/src 600
run before-busy $BEFORE 1500
run after-busy-3 $HERE/src 600
kill $B1 $B2
wait $B1 $B2 2>/dev/null
echo "busy loops stopped $(date +%T) $(uptime)"
rm -rf "$OUT"
