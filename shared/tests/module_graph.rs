//! The library's modules form no cycle: every top-level module's code (comments aside) names
//! only modules that do not name it back, directly or through others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules each module's code refers to as `crate::name`, `crate::{name, ...}`, or
/// through the crate root's re-exports.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let root_exports = [
        ("Idempotency", "idempotency"),
        ("AcquireError", "lease"),
        ("Acquired", "lease"),
        ("Lease", "lease"),
        ("Outcome", "lease"),
        ("RunError", "lease"),
    ];
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_str().unwrap().trim_end_matches(".rs").to_owned();
        if module == "lib" {
            continue;
        }
        let code: String = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let uses = graph.entry(module.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group[..group.find('}').unwrap()]
                    .split(',')
                    .map(|n| n.trim().split("::").next().unwrap())
                    .collect(),
                None => vec![
                    rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                        .next()
                        .unwrap(),
                ],
            };
            for name in names {
                let target = root_exports
                    .iter()
                    .find(|(export, _)| *export == name)
                    .map_or(name, |(_, m)| *m);
                if !target.is_empty() && target != module {
                    uses.insert(target.to_owned());
                }
            }
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for uses in graph.values_mut() {
        uses.retain(|m| modules.contains(m));
    }
    graph
}

/// A cycle through `module`, if there is one.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, module: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        let last = path.last().unwrap().clone();
        for next in &graph[&last] {
            if *next == path[0] {
                let mut cycle = path.clone();
                cycle.push(next.clone());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if let Some(cycle) = walk(graph, path, seen) {
                    return Some(cycle);
                }
                path.pop();
            }
        }
        None
    }
    walk(graph, &mut vec![module.to_owned()], &mut BTreeSet::new())
}

#[test]
fn the_library_has_no_module_cycle() {
    let graph = graph();
    assert!(graph.len() > 10, "modules found: {graph:?}");
    assert!(graph["idempotency"].contains("state"), "{graph:?}");
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            panic!("module cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn a_cycle_is_found() {
    let mut graph = graph();
    graph
        .get_mut("state")
        .unwrap()
        .insert("idempotency".to_owned());
    assert!(cycle_from(&graph, "state").is_some());
}
