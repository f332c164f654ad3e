#!/usr/bin/env bash
# Seeds for the cargo-fuzz targets (fuzz/corpus/<target>, not in git).
#  - etl_parse, decode: every ../shared sample's first 256 KiB, and for larger files its header
#    buffer followed by 192 KiB from the middle and from the end (rundowns, stack walks and
#    embedded metadata sit there);
#  - manifest: the test and built-in manifests, each after a 16-byte payload (the input's first
#    byte says how long the payload is);
#  - pdb: PDBs that clang and lld write for a small C program at -O0, -O1 and -O2 (needs clang,
#    lld and mingw-w64, as the PDB test does).
#   tools/fuzz_seeds.sh [TARGET...]     (default: etl_parse decode manifest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
samples=$root/../shared/etl-samples
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(etl_parse decode manifest)
for t in "${targets[@]}"; do
  out=$root/fuzz/corpus/$t
  mkdir -p "$out"
  if [ "$t" = manifest ]; then
    for m in "$root"/crates/etwkit/tests/data/*.man "$root"/crates/etwkit/src/schema/builtin/manifests/*.xml; do
      { printf '\x10'; head -c 16 /dev/urandom; cat "$m"; } > "$out/$(basename "$m")"
    done
    echo "fuzz_seeds: $(ls "$out" | wc -l) seeds in $out" >&2
    continue
  fi
  if [ "$t" = pdb ]; then
    cc=$(command -v clang-22 || command -v clang) || { echo "fuzz_seeds: no clang" >&2; exit 2; }
    tmp=$(mktemp -d)
    cat > "$tmp/p.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
static inline __attribute__((always_inline)) int twice(int x) { return 2 * x + (x >> 2); }
__declspec(noinline) void *grab(size_t n) { return malloc(n); }
int main(int argc, char **argv) { printf("%p %d\n", grab(64 + argc), twice(argc)); return 0; }
C
    for o in 0 1 2; do
      "$cc" --target=x86_64-w64-mingw32 -g -gcodeview "-O$o" -fuse-ld=lld "-Wl,--pdb=$out/p$o.pdb" \
        "$tmp/p.c" -o "$tmp/p$o.exe"
    done
    rm -rf "$tmp"
    echo "fuzz_seeds: $(ls "$out" | wc -l) seeds in $out" >&2
    continue
  fi
  [ -d "$samples" ] || { echo "fuzz_seeds: no $samples (clone next to ../shared)" >&2; exit 2; }
  for f in "$samples"/*.etl; do
    name=$(basename "$f" .etl)
    size=$(stat -c %s "$f")
    head -c 262144 "$f" > "$out/$name.head"
    # The buffer size is the first buffer header's first field (u32, little-endian).
    bs=$(od -An -tu4 -N4 "$f" | tr -d ' ')
    if [ "$size" -gt 524288 ] && [ "$bs" -gt 0 ] && [ "$bs" -le 1048576 ]; then
      for at in $((size / 2)) $((size - 196608)); do
        at=$((at / bs * bs))
        { head -c "$bs" "$f"
          dd if="$f" iflag=skip_bytes,count_bytes skip="$at" count=196608 status=none; } > "$out/$name.at$at"
      done
    fi
  done
  echo "fuzz_seeds: $(ls "$out" | wc -l) seeds in $out" >&2
done
