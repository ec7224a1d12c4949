//! Sets `cfg(workspace_readme)` when the crate is built inside its workspace, where
//! `../README.md` is the workspace's README: `src/lib.rs` then compiles that README's examples, and
//! those of the pages in `../docs/` beside it, as doc tests. A packaged crate (crates.io, `cargo
//! package`) has no such file, and no such cfg.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(workspace_readme)");
    let manifest_dir =
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let crate_dir = Path::new(&manifest_dir);
    let readme = crate_dir.join("../README.md");
    // Only the README's presence matters (the doc test's `include_str!` follows its content):
    // the script runs again only when it changes itself.
    println!("cargo::rerun-if-changed=build.rs");
    // The workspace layout: this crate in `shared/`, beside the workspace's Cargo.toml.
    let in_workspace = crate_dir.file_name().is_some_and(|name| name == "shared")
        && crate_dir.join("../Cargo.toml").is_file()
        && readme.is_file();
    if in_workspace {
        println!("cargo::rustc-cfg=workspace_readme");
    }
}
