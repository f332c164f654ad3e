#!/usr/bin/env bash
# A profile-guided (PGO) release build of the `etwkit` CLI.
#   tools/build_pgo.sh            -> prints the path of the optimized binary (target/pgo-use/release/etwkit)
#
# 1. Builds an instrumented CLI (target/pgo-gen), which counts the branches and calls it takes.
# 2. Trains it: `dump` (json, csv, table), `stats`, `info`, `net`, `relog`, `export` and `pcap` of
#    every ../shared/etl-samples file except perfview_net.4.5.x86.etl, which `tools/bench_peers.sh`
#    measures (the profile must not be fitted to the benchmark's own file). Without ../shared,
#    the ETL files named in $ETWKIT_PGO_TRAIN (space-separated); with neither, the script stops.
# 3. Merges the counts (llvm-profdata from rustup's llvm-tools component, added if missing) and
#    builds the CLI again with them (target/pgo-use): the compiler lays out hot paths, inlines
#    and orders branches by what the training runs did. The output is the same program: the
#    script checks that the optimized binary's `dump --format json` of every trace it trained on,
#    and of the benchmark's file, equals the plain release build's byte for byte.
# Progress goes to stderr; stdout carries only the binary's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
samples=$root/../shared/etl-samples
bench_file=perfview_net.4.5.x86.etl
gen=$root/target/pgo-gen
use=$root/target/pgo-use
data=$root/target/pgo-data
profile=$root/target/pgo.profdata
log() { echo "build_pgo: $*" >&2; }

host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
  log "adding rustup's llvm-tools component (llvm-profdata)"
  rustup component add llvm-tools >&2
fi
[ -x "$profdata" ] || { log "no llvm-profdata at $profdata"; exit 2; }

train=()
if [ -d "$samples" ]; then
  for f in "$samples"/*.etl; do
    [ "$(basename "$f")" = "$bench_file" ] || train+=("$f")
  done
else
  for f in ${ETWKIT_PGO_TRAIN:-}; do train+=("$f"); done
fi
[ ${#train[@]} -gt 0 ] || { log "no training traces: clone next to ../shared or set ETWKIT_PGO_TRAIN"; exit 2; }

# 1. The instrumented build. Its profile counters keep every function of the crate alive, so the
# Windows backend's imports (unreachable on other systems, and normally dropped by the linker)
# stay referenced: on those systems they are defined as address 0 for this build only. Each
# failed link names some of them (lld stops at 20 errors); the binary crate is linked again with
# those defined until it links. The names are kept in target/pgo-gen/undefined.txt for the next run.
log "instrumented build (target/pgo-gen)"
flags="-Cprofile-generate=$data"
mkdir -p "$gen"
known=$gen/undefined.txt
touch "$known"
link() {
  local defs=()
  for s in $(cat "$known"); do defs+=("-Clink-arg=-Wl,--defsym=$s=0"); done
  RUSTFLAGS="$flags" CARGO_TARGET_DIR=$gen cargo rustc --release -p etwkit-cli --bin etwkit -- "${defs[@]}" 2>&1
}
until out=$(link); do
  # lld: "undefined symbol: X"; GNU ld: "undefined reference to `X'".
  new=$(grep -oE "undefined (symbol: |reference to \`)[A-Za-z_][A-Za-z0-9_]*" <<<"$out" |
    sed -E "s/.*(: |\`)//" | sort -u | comm -23 - <(sort -u "$known"))
  if [ -z "$new" ]; then
    echo "$out" >&2
    exit 1
  fi
  echo "$new" >> "$known"
  log "linking again with $(wc -l <"$known") unreachable imports defined as 0"
done

# 2. Training (again only when the instrumented binary changed: the same profile leaves the
# optimized build up to date).
if [ "$profile" -nt "$gen/release/etwkit" ]; then
  log "profile up to date ($profile)"
else
  rm -rf "$data"
  log "training on ${#train[@]} traces"
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  for f in "${train[@]}"; do
    # Every command that reads files, so that none of them is laid out as cold code. Bad samples
    # (truncated on purpose) and pcap of traces without packets exit non-zero; their counts are
    # kept all the same.
    for args in "dump --format json" "dump --format csv" "dump" "stats" "info" "net" \
      "relog -o $scratch/r.etl" "export --overwrite -o $scratch/ds" "pcap -o $scratch/p.pcapng"; do
      # shellcheck disable=SC2086
      "$gen/release/etwkit" $args "$f" >/dev/null 2>&1 || true
    done
  done
  "$profdata" merge -o "$profile" "$data"/*.profraw
fi

# 3. The optimized build.
log "optimized build (target/pgo-use)"
RUSTFLAGS="-Cprofile-use=$profile" CARGO_TARGET_DIR=$use cargo build -q --release -p etwkit-cli >&2

# Same output as the plain release build: `dump --format json` (stdout and stderr) of every
# training trace and of the benchmark's file.
cargo build -q --release -p etwkit-cli >&2
check=("${train[@]}")
if [ -f "$samples/$bench_file" ]; then check+=("$samples/$bench_file"); fi
for f in "${check[@]}"; do
  if ! cmp -s <("$use/release/etwkit" dump "$f" --format json 2>&1) \
              <("$root/target/release/etwkit" dump "$f" --format json 2>&1); then
    log "the optimized binary's dump of $f differs from the release build's"
    exit 1
  fi
done
log "its dump of ${#check[@]} traces equals the release build's"
echo "$use/release/etwkit"
