#!/usr/bin/env bash
# Heap tracing overhead: a malloc/free storm (crates/etwkit/tests/heap_progs/storm.c) untraced, under
# `etwkit heap` (spawn mode; with and without allocation stacks), and under heaptrack, same program,
# same iteration count. Prints iterations/s (one malloc + one free each) and the slowdown ratios.
# Then attach mode, in one run of one storm (attach_storm.c, one thread, printing its rate every
# 200 ms and where its malloc GOT entry points): untraced, `etwkit heap --pid` with the shim loaded
# into it, with uprobes, and `heaptrack -p` (attached until the storm ends); by wall-clock rate and
# by calls per second of the storm's own CPU time (the figure that holds on a loaded machine).
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

# storm prints "<iterations per wall second> <per CPU second of its own process>"; both are kept.
rate() { awk '{print $1, $2}'; }

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
# label, "wall cpu" of the setup, "wall cpu" untraced
row() {
  set -- "$1" $2 $3
  printf '%-36s %14s %8s %16s %8s\n' "$1" "$2" "$(ratio "$4" "$2")" "$3" "$(ratio "$5" "$3")"
}
printf '%-36s %14s %8s %16s %8s\n' "setup" "iterations/s" "slowdown" "per CPU-second" "slowdown"
row "untraced" "$base" "$base"
row "etwkit heap (shim, no stacks)" "$shim_nostack" "$base"
row "etwkit heap (shim, alloc stacks)" "$shim_stacks" "$base"
row "etwkit heap (uprobes, no stacks)" "$nostack" "$base"
row "etwkit heap (uprobes, alloc stacks)" "$stacks" "$base"
if [ -n "$ht" ]; then
  row "heaptrack" "$ht" "$base"
else
  echo "heaptrack not installed: apt-get install heaptrack"
fi

# ---- attach mode: one storm, four phases ----
cc -O2 -fno-plt -pthread -o "$work/astorm" crates/etwkit/tests/heap_progs/attach_storm.c -ldl
"$work/astorm" 17 1 >"$work/astorm.out" &
spid=$!
# CPU time of the storm process, sampled every 100 ms: "S <unix time> <user+system ticks>" (its own
# CPU time: what tracing costs the traced process whatever else shares the CPUs).
hz=$(getconf CLK_TCK)
(while [ -r "/proc/$spid/stat" ]; do
  c=$(awk '{print $14 + $15}' "/proc/$spid/stat" 2>/dev/null) || break
  echo "S $(date +%s.%N) $c"
  sleep 0.1
done) >"$work/cpu" &
t_start=$(date +%s.%N)
sleep 2.5
t_shim0=$(date +%s.%N)
"$ETWKIT" heap --pid "$spid" --duration 3 --format json >/dev/null 2>"$work/attach_shim.err"
t_shim1=$(date +%s.%N)
sleep 1
"$ETWKIT" heap --mode uprobe --pid "$spid" --duration 3 --format json >/dev/null 2>&1
t_uprobe_end=$(date +%s.%N)
sleep 1
t_ht0=$(date +%s.%N)
if command -v heaptrack >/dev/null; then
  # From the scratch directory: heaptrack -p writes its data file into the current directory.
  (cd "$work" && heaptrack -p "$spid" -o "$work/htp" >"$work/htp.log" 2>&1) || true
fi
wait "$spid"
wait
# Calls per CPU second of the storm between two times: calls from its 200 ms RATE lines, CPU time
# from the samples taken at or before each end.
cpu_rate() {
  awk -v a="$1" -v b="$2" -v hz="$hz" '
    FILENAME ~ /cpu$/ { if ($2 <= a) ca = $3; if ($2 <= b) cb = $3; next }
    $1 == "RATE" && $4 > a && $4 <= b { calls += $2 * 0.2 }
    END { cpu = (cb - ca) / hz; if (cpu > 0) printf "%.0f", calls / cpu; else print 0 }
  ' "$work/cpu" "$work/astorm.out"
}
median() { sort -n | awk '{a[NR]=$1} END { if (NR) print a[int((NR+1)/2)]; else print 0 }'; }
a_base=$(awk '$1=="RATE" && $3=="libc.so.6" && NR>1 && !seen {print $2} $3 ~ /heapshim/ {seen=1}' "$work/astorm.out" | median)
a_shim=$(awk '$1=="RATE" && $3 ~ /etwkit_heapshim/ {print $2}' "$work/astorm.out" | median)
# The uprobe run's last 2 s were traced for sure (--duration counts from the end of its setup).
a_up=$(awk -v e="$t_uprobe_end" '$1=="RATE" && $4 > e - 2.3 && $4 < e - 0.3 {print $2}' "$work/astorm.out" | median)
a_ht=$(awk '$1=="RATE" && $3 ~ /heaptrack/ {print $2}' "$work/astorm.out" | median)
plus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a + b }'; }
c_base=$(cpu_rate "$(plus "$t_start" 0.5)" "$t_shim0")
c_shim=$(cpu_rate "$t_shim0" "$t_shim1")
c_up=$(cpu_rate "$(plus "$t_uprobe_end" -2.3)" "$(plus "$t_uprobe_end" -0.3)")
c_ht=$(cpu_rate "$t_ht0" 9999999999)
echo
printf '%-36s %14s %8s %16s %8s\n' "attach to a running storm" "calls/s" "slowdown" "per CPU-second" "slowdown"
row "untraced" "$a_base $c_base" "$a_base $c_base"
row "etwkit heap --pid (shim)" "$a_shim $c_shim" "$a_base $c_base"
row "etwkit heap --pid --mode uprobe" "$a_up $c_up" "$a_base $c_base"
if [ "$a_ht" != 0 ]; then
  row "heaptrack -p" "$a_ht $c_ht" "$a_base $c_base"
else
  echo "heaptrack -p: not installed or did not attach (apt-get install heaptrack)"
fi
echo "(per CPU-second: calls per second of the storm's own CPU time; the shim's row spans the whole"
echo " attach, injection and detach included. Goal for the shim: at most 3.0x, and below heaptrack -p)"
