#!/usr/bin/env bash
# PDB symbolization against LLVM's: SQLite (the amalgamation that the libsqlite3-sys crate carries)
# built as a Windows DLL with clang and lld for mingw-w64 at -O2 (a 1 MB .text, 3 MB PDB, heavy
# inlining), every 16th byte of its code named by etwkit (examples/pdb_symbolize.rs, the library's
# Symbolizer) and by llvm-symbolizer, inline chains included. Prints both times, the ratio, and how
# many addresses' chains differ (function, file, line of every inlined call and of the function).
#   tools/bench_symbols.sh            (needs clang-22/lld-22 or clang/lld, llvm-symbolizer, mingw-w64)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work="$root/target/bench-symbols"
mkdir -p "$work"
cc=$(command -v clang-22 || command -v clang) || { echo "bench_symbols: no clang" >&2; exit 2; }
sym=$(command -v llvm-symbolizer-22 || command -v llvm-symbolizer) || { echo "bench_symbols: no llvm-symbolizer" >&2; exit 2; }

# The SQLite amalgamation, from the crate registry (fetched by a throwaway project when absent).
src=$(ls "$HOME"/.cargo/registry/src/*/libsqlite3-sys-*/sqlite3/sqlite3.c 2>/dev/null | head -1 || true)
if [ -z "$src" ]; then
  (cd "$work" && rm -rf fetch && cargo new -q --vcs none fetch && cd fetch &&
    cargo add -q libsqlite3-sys --features bundled && cargo fetch -q)
  src=$(ls "$HOME"/.cargo/registry/src/*/libsqlite3-sys-*/sqlite3/sqlite3.c | head -1)
fi
if [ ! -f "$work/sqlite3.dll" ] || [ "$src" -nt "$work/sqlite3.dll" ]; then
  echo "bench_symbols: building sqlite3.dll with $cc (about 30 s)" >&2
  "$cc" --target=x86_64-w64-mingw32 -g -gcodeview -O2 -shared -fuse-ld=lld -Wl,--build-id=none \
    "-Wl,--pdb=$work/sqlite3.pdb" "$src" -o "$work/sqlite3.dll"
  x86_64-w64-mingw32-strip --strip-debug "$work/sqlite3.dll"
fi
cargo build -q --release -p etwkit --example pdb_symbolize
ex="$root/target/release/examples/pdb_symbolize"

python3 - "$work" "$ex" "$sym" <<'EOF'
import subprocess, sys, time
work, ex, sym = sys.argv[1:]
dll = f"{work}/sqlite3.dll"
head = subprocess.run(["x86_64-w64-mingw32-objdump", "-h", dll], capture_output=True, text=True).stdout
text = next(l.split() for l in head.splitlines() if " .text " in l)
size, vma = int(text[2], 16), int(text[3], 16)
base = vma & ~0xFFFFFF  # the image base (the DLL's .text lies at base + 0x1000)
rvas = list(range(vma - base, vma - base + size, 16))

def run(cmd, addrs):
    t = time.perf_counter()
    out = subprocess.run(cmd, input="\n".join(addrs) + "\n", capture_output=True, text=True,
                         check=True).stdout
    return time.perf_counter() - t, out

ours_t, ours = run([ex, dll, work], [hex(r) for r in rvas])
llvm_t, llvm = run([sym, f"--obj={dll}", "--functions=linkage"], [hex(base + r) for r in rvas])

def chains(text):
    out = []
    for block in text.rstrip("\n").split("\n\n"):
        lines = block.split("\n")
        chain = []
        for i in range(0, len(lines) - 1, 2):
            name = lines[i].strip() or "??"
            file, line, _ = lines[i + 1].rsplit(":", 2)
            chain.append((name, file.rsplit("/", 1)[-1], int(line)))
        out.append(chain)
    return out

a, b = chains(ours), chains(llvm)
assert len(a) == len(b) == len(rvas), (len(a), len(b), len(rvas))
inlined = sum(1 for c in a if len(c) > 1)
differ = sum(1 for x, y in zip(a, b) if x != y)
print(f"addresses: {len(rvas)} (every 16th byte of {size} bytes of code; {inlined} in inlined code)")
print(f"etwkit (Symbolizer, one process):  {ours_t:7.3f} s")
print(f"llvm-symbolizer (LLVM's PDB reader): {llvm_t:7.3f} s")
print(f"ratio: etwkit is {llvm_t / ours_t:.0f}x llvm-symbolizer")
print(f"inline chains that differ: {differ} of {len(rvas)}")
EOF
