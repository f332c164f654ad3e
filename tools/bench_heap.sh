#!/usr/bin/env bash
# Heap tracing overhead: a malloc/free storm (crates/etwkit/tests/heap_progs/storm.c) untraced, under
# `etwkit heap` (spawn mode; with and without allocation stacks), and under heaptrack, same program,
# same iteration count. Prints iterations/s (one malloc + one free each) and the slowdown ratios.
# Needs root (perf uprobes), cc, and heaptrack (`apt-get install heaptrack`) for the last column.
# Usage: tools/bench_heap.sh [ITERATIONS]   (default 200000)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/storm" crates/etwkit/tests/heap_progs/storm.c
cargo build -q --release -p etwkit-cli
ETWKIT=target/release/etwkit

rate() { awk '{print $1}'; }   # storm prints "<iterations per wall second> <per CPU second>"

# Untraced: 1 s of storm (a rate; N iterations alone would finish too fast to time well).
base=$("$work/storm" 1 | rate)
"$ETWKIT" heap --stacks none --format json -- "$work/storm" "$N" n >"$work/nostack.out" 2>/dev/null
nostack=$(sed -n 1p "$work/nostack.out" | rate)
"$ETWKIT" heap --stacks alloc --format json -- "$work/storm" "$N" n >"$work/stacks.out" 2>/dev/null
stacks=$(sed -n 1p "$work/stacks.out" | rate)
if command -v heaptrack >/dev/null; then
  (cd "$work" && heaptrack -o "$work/ht" ./storm "$N" n >"$work/ht.out" 2>&1) || true
  ht=$(grep -E '^[0-9]+ [0-9]+$' "$work/ht.out" | rate)
else
  ht=""
fi
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1fx", a / b; else print "n/a" }'; }
printf '%-34s %14s %10s\n' "setup" "iterations/s" "slowdown"
printf '%-34s %14s %10s\n' "untraced" "$base" "1.0x"
printf '%-34s %14s %10s\n' "etwkit heap (uprobes, no stacks)" "$nostack" "$(ratio "$base" "$nostack")"
printf '%-34s %14s %10s\n' "etwkit heap (uprobes, alloc stacks)" "$stacks" "$(ratio "$base" "$stacks")"
if [ -n "$ht" ]; then
  printf '%-34s %14s %10s\n' "heaptrack" "$ht" "$(ratio "$base" "$ht")"
else
  echo "heaptrack not installed: apt-get install heaptrack"
fi
