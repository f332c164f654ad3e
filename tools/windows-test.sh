#!/usr/bin/env bash
# Builds etwkit for x86_64-pc-windows-gnu and runs its tests under wine (see
# ../shared/notes/windows-build.md and README "Windows"). Idempotent: installs what is missing,
# reuses the wine prefix and the target/win build. Extra arguments go to `cargo test`
# (e.g. `--test win_convert`).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

pkgs=()
for p in rustc-web cargo-web rust-web-src gcc-mingw-w64-x86-64 wine64; do
  dpkg -s "$p" >/dev/null 2>&1 || pkgs+=("$p")
done
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "windows-test: installing ${pkgs[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

export WINEPREFIX=$ROOT/target/wineprefix WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
if [ ! -f "$WINEPREFIX/system.reg" ]; then
  mkdir -p "$WINEPREFIX"
  /usr/lib/wine/wine64 wineboot -i >/dev/null 2>&1 || true
  /usr/lib/wine/wineserver -w
fi
# Wine 8 has no bcryptprimitives.dll (ProcessPrng), which Rust's std imports: build our stand-in.
dll=$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll
src=$ROOT/tools/windows/bcryptprimitives.c
if [ ! -f "$dll" ] || [ "$src" -nt "$dll" ]; then
  x86_64-w64-mingw32-gcc -O2 -shared -o "$dll" "$src" "$ROOT/tools/windows/bcryptprimitives.def" -ladvapi32
fi

# One wineserver for the whole run: a server exiting between two test programs resets the next
# program's connection ("wine client error ... Connection reset by peer").
/usr/lib/wine/wineserver -p >/dev/null 2>&1 </dev/null
trap '/usr/lib/wine/wineserver -k 2>/dev/null || true' EXIT
echo "windows-test: $(/usr/lib/wine/wine64 --version) running etwkit's tests built for x86_64-pc-windows-gnu" >&2
log=$ROOT/target/win/windows-test.log
mkdir -p "$ROOT/target/win"
# Debian's cargo must use Debian's rustc (1.96, matching rust-web-src), never rustup's. opt-level 1
# (this build only, its own target dir): the sample-heavy tests run several times faster under wine.
# Output goes to a file, then to stdout: wine's helper processes (winedevice.exe) outlive the tests
# holding whatever stdout they inherited, which would keep a pipe open.
winenv=(RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 CARGO_PROFILE_DEV_OPT_LEVEL=1
  CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
  CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=/usr/lib/wine/wine64
  CARGO_TARGET_DIR=$ROOT/target/win CARGO_TERM_COLOR=never)
# The CLI (heap, trace, net, demo through `live` alone) must type-check for Windows too.
env "${winenv[@]}" /usr/bin/cargo check -q -Zbuild-std --target x86_64-pc-windows-gnu -p etwkit-cli
echo "windows-test: etwkit-cli type-checks for x86_64-pc-windows-gnu" >&2
set +e
env "${winenv[@]}" /usr/bin/cargo test -Zbuild-std --target x86_64-pc-windows-gnu -p etwkit --lib --tests --no-fail-fast "$@" >"$log" 2>&1
rc=$?
set -e
cat "$log"
awk '/^test result:/ { bins++; p += $4; f += $6 } END { printf "windows-test SUMMARY (wine): %d test binaries, %d passed, %d failed\n", bins, p, f }' "$log"
exit "$rc"
