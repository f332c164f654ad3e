//! Names module-relative addresses of a Windows image from its PDB, as `etwkit cpu --symbols` does,
//! one per line on stdin (hex, `0x` optional), in llvm-symbolizer's output shape (per address, the
//! inlined calls innermost first and then the function, each as its name and `file:line:0`, and a
//! blank line; `??` where nothing is known), so the two can be compared.
//!
//! ```text
//! cargo run --release -p etwkit --example pdb_symbolize -- IMAGE.dll 'srv*C:\symbols' < rvas.txt
//! ```

use std::io::{BufRead, Write};

use etwkit::decode::symbols::pdb::image_pdb_id;
use etwkit::decode::symbols::{SymbolPath, Symbolizer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let image = args
        .next()
        .ok_or("usage: pdb_symbolize IMAGE [SYMBOL_PATH] < rvas")?;
    let path = SymbolPath::parse(&args.next().unwrap_or_default())?;
    let id = image_pdb_id(image.as_ref()).ok_or("the image names no PDB")?;
    let mut symbols = Symbolizer::new(path);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let hex = line.trim().trim_start_matches("0x");
        let rva = u64::from_str_radix(hex, 16)?;
        match symbols.resolve(&id, rva) {
            Some(r) => {
                let frames = r.inlined.iter().map(|i| (&i.function, &i.file, i.line));
                for (f, file, line) in frames.chain([(&r.function, &r.file, r.line)]) {
                    let f = f.as_deref().unwrap_or("??");
                    let file = file.as_deref().unwrap_or("??");
                    writeln!(out, "{f}\n{file}:{}:0", line.unwrap_or(0))?;
                }
                writeln!(out)?;
            }
            None => writeln!(out, "??\n??:0:0\n")?,
        }
    }
    out.flush()?;
    eprintln!("{}", symbols.summary().line());
    Ok(())
}
