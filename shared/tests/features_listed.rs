//! The crate's features, listed in its `Cargo.toml`, in its README's table, in its docs' list
//! (`src/lib.rs`) and, in the workspace, in the workspace README's table: the same names, and
//! the same defaults. A feature added to `Cargo.toml` and not to a list fails here, naming it.

use std::collections::BTreeMap;
use std::path::Path;

/// Each feature's name and whether it is a default one.
type Features = BTreeMap<String, bool>;

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `[features]` table's entries, `default` among them: each `name = [...]`, on one line as
/// written here or over several as `cargo package` normalizes the manifest.
fn cargo_toml() -> Features {
    let manifest = read("Cargo.toml");
    let start = manifest.find("\n[features]\n").expect("a [features] table") + 12;
    let table = &manifest[start..];
    let table = &table[..table.find("\n[").unwrap_or(table.len())];
    // Each entry: its name, and its list up to the closing bracket.
    let mut entries: Vec<(&str, &str)> = Vec::new();
    let mut rest = table;
    while let Some(eq) = rest.find(" = [") {
        let name = rest[..eq].rsplit('\n').next().unwrap_or_default().trim();
        let list_end = rest[eq..].find(']').map_or(rest.len(), |end| eq + end + 1);
        entries.push((name, &rest[eq + 3..list_end]));
        rest = &rest[list_end..];
    }
    let defaults = entries
        .iter()
        .find(|(name, _)| *name == "default")
        .map(|(_, list)| *list)
        .expect("default features");
    entries
        .iter()
        .filter(|(name, _)| *name != "default" && !name.starts_with('#'))
        .map(|(name, _)| (name.to_string(), defaults.contains(&format!("\"{name}\""))))
        .collect()
}

/// The rows of a Markdown table `| feature | default | what it adds |`.
fn markdown_table(text: &str) -> Features {
    let start = text
        .find("| feature | default | what it adds |")
        .expect("the features table");
    text[start..]
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[2] == "yes")
        })
        .collect()
}

/// The items of `src/lib.rs`'s `# Features` list: `` - `name` (default): `` or `` - `name`: ``.
fn rustdoc_list(lib: &str) -> Features {
    let start = lib.find("//! # Features").expect("the Features section");
    let end = start
        + lib[start..]
            .find("//! # Examples")
            .expect("the next section");
    lib[start..end]
        .lines()
        .filter_map(|line| {
            let item = line
                .trim_start_matches("//!")
                .trim_start_matches("#![cfg_attr(")
                .trim();
            let item = item
                .strip_prefix("- `")
                .or_else(|| item.split("doc = \" - `").nth(1))?;
            let (name, rest) = item.split_once('`')?;
            Some((name.to_owned(), rest.starts_with(" (default)")))
        })
        .collect()
}

#[test]
fn every_list_of_the_features_is_the_manifests() {
    let manifest = cargo_toml();
    assert!(manifest.contains_key("test-util"), "{manifest:?}");
    assert_eq!(
        markdown_table(&read("README.md")),
        manifest,
        "shared/README.md"
    );
    assert_eq!(rustdoc_list(&read("src/lib.rs")), manifest, "src/lib.rs");
    #[cfg(workspace_readme)]
    assert_eq!(
        markdown_table(&read("../README.md")),
        manifest,
        "the workspace README"
    );
}
