//! The workspace's release profile is what Lambda runs: `cargo lambda build --release` (what
//! `sam build` runs for the template's `rust-cargolambda` functions) sets `panic = "abort"` and
//! `strip = "symbols"` in a release profile that leaves them out. With an abort, a handler's
//! panic would end the invocation and bring back every record of its batch, where the batch
//! processor catches an unwinding panic and fails that record alone (`tests/processes.rs` shows
//! it on the debug binaries).

/// The `key = value` lines of the `[profile.release]` section of the workspace manifest.
fn release_profile() -> Vec<(String, String)> {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
        .expect("the workspace manifest");
    manifest
        .lines()
        .skip_while(|line| line.trim() != "[profile.release]")
        .skip(1)
        .take_while(|line| !line.trim_start().starts_with('['))
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or_default();
            let (key, value) = line.split_once('=')?;
            Some((
                key.trim().to_owned(),
                value.trim().trim_matches('"').to_owned(),
            ))
        })
        .collect()
}

#[test]
fn release_builds_unwind_a_panic_as_the_batch_processor_needs() {
    let profile = release_profile();
    assert!(
        profile.contains(&("panic".to_owned(), "unwind".to_owned())),
        "[profile.release] must set panic = \"unwind\" (cargo lambda would build with abort): {profile:?}"
    );
}

#[test]
fn release_builds_are_stripped_as_deployed() {
    let profile = release_profile();
    assert!(
        profile.contains(&("strip".to_owned(), "symbols".to_owned())),
        "[profile.release] must set strip = \"symbols\", as cargo lambda deploys: {profile:?}"
    );
}
