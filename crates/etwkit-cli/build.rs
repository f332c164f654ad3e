//! Builds the allocator shim (crate etwkit-heapshim, a cdylib) and embeds it in the `etwkit`
//! executable, so `etwkit heap -- CMD` traces exactly however etwkit was built (`cargo run`,
//! `cargo install --path`, `cargo build`): at run time the bytes go to a memfd that the traced
//! program preloads. The shim is always built optimized, into `<target>/heapshim-embed`. When it
//! cannot be built, etwkit still builds and `heap` says why it falls back to uprobes.
//! `ETWKIT_NO_EMBEDDED_SHIM=1` skips it.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(etwkit_embedded_shim)");
    println!("cargo::rerun-if-env-changed=ETWKIT_NO_EMBEDDED_SHIM");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if os != "linux" {
        return;
    }
    if arch != "x86_64" {
        missing("the shim supports x86-64 only");
        return;
    }
    if std::env::var_os("ETWKIT_NO_EMBEDDED_SHIM").is_some_and(|v| v == "1") {
        missing("ETWKIT_NO_EMBEDDED_SHIM=1 was set at build time");
        return;
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let shim_dir = manifest.join("../etwkit-heapshim");
    if !shim_dir.join("Cargo.toml").is_file() {
        missing("the etwkit-heapshim sources were not next to etwkit-cli at build time");
        return;
    }
    println!("cargo::rerun-if-changed={}", shim_dir.join("src").display());
    println!(
        "cargo::rerun-if-changed={}",
        shim_dir.join("Cargo.toml").display()
    );
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // One shim build shared by every profile of this target directory (OUT_DIR is
    // <target>/<profile>/build/<package>-<hash>/out): clippy, test and release builds reuse it.
    let target_dir = out
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "build"))
        .and_then(|b| b.parent()?.parent())
        .map(|t| t.join("heapshim-embed"))
        .unwrap_or_else(|| out.join("shim-target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--lib", "--manifest-path"])
        .arg(shim_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // Not clippy's driver (when the outer command is `cargo clippy`), nor the outer profile.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        // Small: the shim's own frames never show in reports.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        // Our stdout is read by cargo as build-script directives.
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let result = cmd.output();
    let built = target_dir.join("release/libetwkit_heapshim.so");
    match result {
        Ok(o) if o.status.success() && built.is_file() => {
            std::fs::copy(&built, out.join("libetwkit_heapshim.so")).expect("copy the shim");
            println!("cargo::rustc-cfg=etwkit_embedded_shim");
        }
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().rfind(|l| l.starts_with("error")).unwrap_or("");
            missing(&format!("building etwkit-heapshim failed: {last}"));
        }
        Err(e) => missing(&format!(
            "cargo could not be run to build etwkit-heapshim: {e}"
        )),
    }
}

fn missing(why: &str) {
    println!("cargo::warning=etwkit heap will use uprobes only: {why}");
    println!("cargo::rustc-env=ETWKIT_SHIM_MISSING={why}");
}
