#!/usr/bin/env bash
# Heap tracing overhead: a malloc/free storm (crates/etwkit/tests/heap_progs/storm.c) untraced, under
# `etwkit heap` (spawn mode; with and without allocation stacks), and under heaptrack, same program,
# same iteration count. Prints iterations/s (one malloc + one free each) and the slowdown ratios.
# Needs root (perf uprobes), cc, and heaptrack (`apt-get install heaptrack`) for the last column.
# Usage: tools/bench_heap.sh [ITERATIONS]   (default 200000 under uprobes; x10 under heaptrack,
# x100 under the shim, so each run lasts long enough to time)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/storm" crates/etwkit/tests/heap_progs/storm.c
cargo build -q --release -p etwkit-cli -p etwkit-heapshim
ETWKIT=target/release/etwkit

rate() { awk '{print $1}'; }   # storm prints "<iterations per wall second> <per CPU second>"

# Untraced: 1 s of storm (a rate; N iterations alone would finish too fast to time well).
base=$("$work/storm" 1 | rate)
run() { # mode stacks iterations
  "$ETWKIT" heap --mode "$1" --stacks "$2" --format json -- "$work/storm" "$3" n >"$work/run.out" 2>/dev/null
  sed -n 1p "$work/run.out" | rate
}
SHIM_N=$((N * 100))
shim_nostack=$(run shim none "$SHIM_N")
shim_stacks=$(run shim alloc "$SHIM_N")
nostack=$(run uprobe none "$N")
stacks=$(run uprobe alloc "$N")
if command -v heaptrack >/dev/null; then
  (cd "$work" && heaptrack -o "$work/ht" ./storm "$((N * 10))" n >"$work/ht.out" 2>&1) || true
  ht=$(grep -E '^[0-9]+ [0-9]+$' "$work/ht.out" | rate)
else
  ht=""
fi
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1fx", a / b; else print "n/a" }'; }
printf '%-34s %14s %10s\n' "setup" "iterations/s" "slowdown"
printf '%-34s %14s %10s\n' "untraced" "$base" "1.0x"
printf '%-34s %14s %10s\n' "etwkit heap (shim, no stacks)" "$shim_nostack" "$(ratio "$base" "$shim_nostack")"
printf '%-34s %14s %10s\n' "etwkit heap (shim, alloc stacks)" "$shim_stacks" "$(ratio "$base" "$shim_stacks")"
printf '%-34s %14s %10s\n' "etwkit heap (uprobes, no stacks)" "$nostack" "$(ratio "$base" "$nostack")"
printf '%-34s %14s %10s\n' "etwkit heap (uprobes, alloc stacks)" "$stacks" "$(ratio "$base" "$stacks")"
if [ -n "$ht" ]; then
  printf '%-34s %14s %10s\n' "heaptrack" "$ht" "$(ratio "$base" "$ht")"
else
  echo "heaptrack not installed: apt-get install heaptrack"
fi
