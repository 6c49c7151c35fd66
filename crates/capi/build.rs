//! Generates the C header with cbindgen from `src/lib.rs` (settings and
//! the header's preamble in `cbindgen.toml`) and writes it to:
//! - `$OUT_DIR/pontoon.h`, which the crate's test compares with the
//!   checked-in `include/pontoon.h`;
//! - `target/<profile>/include/pontoon.h`, beside `libpontoon.so`, for C
//!   programs. That directory is OUT_DIR's third ancestor: OUT_DIR is
//!   `<target-dir>[/<triple>]/<profile>/build/pontoon-capi-<hash>/out`.
//!   The file is rewritten only when its contents change.

use std::path::{Path, PathBuf};

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    for f in ["src", "cbindgen.toml", "build.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .unwrap_or_else(|e| panic!("reading cbindgen.toml: {e}"));
    let mut header = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen could not generate pontoon.h: {e}"))
        .write(&mut header);
    write_if_changed(&out_dir.join("pontoon.h"), &header);
    if let Some(profile_dir) = out_dir.ancestors().nth(3) {
        let include = profile_dir.join("include");
        std::fs::create_dir_all(&include)
            .unwrap_or_else(|e| panic!("creating {}: {e}", include.display()));
        write_if_changed(&include.join("pontoon.h"), &header);
    }
}

/// Writes `data` to `path` (through a temporary file and a rename) unless
/// it already holds exactly that.
fn write_if_changed(path: &Path, data: &[u8]) {
    if std::fs::read(path).is_ok_and(|old| old == data) {
        return;
    }
    let tmp = path.with_extension(format!("h.{}.tmp", std::process::id()));
    std::fs::write(&tmp, data).unwrap_or_else(|e| panic!("writing {}: {e}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
