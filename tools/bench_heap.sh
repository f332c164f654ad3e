#!/usr/bin/env bash
# Heap tracing overhead: a malloc/free storm (crates/etwkit/tests/heap_progs/storm.c) untraced, under
# `etwkit heap` (spawn mode; with and without allocation stacks), and under heaptrack, same program,
# same iteration count. Prints iterations/s (one malloc + one free each) and the slowdown ratios.
# Then attach mode, in one run of one storm (attach_storm.c, one thread, printing its rate every
# 200 ms and where its malloc GOT entry points): untraced, `etwkit heap --pid` with the shim loaded
# into it, with uprobes, and `heaptrack -p` (attached until the storm ends).
# Needs root (perf uprobes, ptrace), cc, and heaptrack (`apt-get install heaptrack`) for its rows.
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
run() { # mode stacks iterations (the program's own output arrives on etwkit's stderr)
  "$ETWKIT" heap --mode "$1" --stacks "$2" --format json -- "$work/storm" "$3" n >/dev/null 2>"$work/run.err"
  grep -E '^[0-9]+ [0-9]+$' "$work/run.err" | head -1 | rate
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

# ---- attach mode: one storm, four phases ----
cc -O2 -fno-plt -pthread -o "$work/astorm" crates/etwkit/tests/heap_progs/attach_storm.c -ldl
"$work/astorm" 17 1 >"$work/astorm.out" &
spid=$!
sleep 2.5
"$ETWKIT" heap --pid "$spid" --duration 3 --format json >/dev/null 2>"$work/attach_shim.err"
sleep 1
"$ETWKIT" heap --mode uprobe --pid "$spid" --duration 3 --format json >/dev/null 2>&1
t_uprobe_end=$(date +%s.%N)
sleep 1
if command -v heaptrack >/dev/null; then
  # From the scratch directory: heaptrack -p writes its data file into the current directory.
  (cd "$work" && heaptrack -p "$spid" -o "$work/htp" >"$work/htp.log" 2>&1) || true
fi
wait "$spid"
median() { sort -n | awk '{a[NR]=$1} END { if (NR) print a[int((NR+1)/2)]; else print 0 }'; }
a_base=$(awk '$1=="RATE" && $3=="libc.so.6" && NR>1 && !seen {print $2} $3 ~ /heapshim/ {seen=1}' "$work/astorm.out" | median)
a_shim=$(awk '$1=="RATE" && $3 ~ /etwkit_heapshim/ {print $2}' "$work/astorm.out" | median)
# The uprobe run's last 2 s were traced for sure (--duration counts from the end of its setup).
a_up=$(awk -v e="$t_uprobe_end" '$1=="RATE" && $4 > e - 2.3 && $4 < e - 0.3 {print $2}' "$work/astorm.out" | median)
a_ht=$(awk '$1=="RATE" && $3 ~ /heaptrack/ {print $2}' "$work/astorm.out" | median)
echo
printf '%-34s %14s %10s\n' "attach to a running storm" "calls/s" "slowdown"
printf '%-34s %14s %10s\n' "untraced" "$a_base" "1.0x"
printf '%-34s %14s %10s\n' "etwkit heap --pid (shim)" "$a_shim" "$(ratio "$a_base" "$a_shim")"
printf '%-34s %14s %10s\n' "etwkit heap --pid --mode uprobe" "$a_up" "$(ratio "$a_base" "$a_up")"
if [ "$a_ht" != 0 ]; then
  printf '%-34s %14s %10s\n' "heaptrack -p" "$a_ht" "$(ratio "$a_base" "$a_ht")"
else
  echo "heaptrack -p: not installed or did not attach (apt-get install heaptrack)"
fi
