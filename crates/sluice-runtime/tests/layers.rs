//! The runtime's modules form layers, and imports only point down (ARCHITECTURE.md, "Layers"):
//! a module may use a module of its own layer's rank or below, never one above. Read from the
//! sources, so a new upward import fails here with the file and the line. Every top-level
//! module has a rank (an unranked one fails), and an item read through the crate root
//! (`crate::Name`, re-exported by `lib.rs`) counts as an import of the module it comes from.

use std::collections::BTreeMap;
use std::path::Path;

/// Each top-level module of `sluice-runtime` and its rank, lowest first.
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("key_groups", 0),
    ("metrics", 0),
    ("storage", 0),
    ("failover", 0),
    ("state", 1),
    ("timer", 1),
    ("checkpoint", 2),
    ("operator", 3),
    ("task", 4),
    ("watermark", 5),
    ("process", 5),
    ("window", 5),
    ("exchange", 6),
    ("graph", 7),
    ("job", 8),
    ("cluster", 9),
    ("api", 10),
    ("testing", 11),
];

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The code of `text` without its comment lines (documentation may link anywhere) and without
/// an inline `#[cfg(test)] mod tests` (unit tests may use the test kit of any layer).
fn code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tests_at = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod tests"));
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if l.trim_start().starts_with("//") || tests_at.is_some_and(|t| i >= t) {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `lib.rs` re-exports at the crate root, by name: the module each item comes from.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for statement in code(lib).split(';') {
        let Some(at) = statement.find("pub use ") else {
            continue;
        };
        let path = &statement[at + "pub use ".len()..];
        let module = ident(path);
        if module == "crate" || module.is_empty() {
            continue; // the prelude re-exports the root's own names
        }
        for item in path[module.len()..].replace(['{', '}'], ",").split(',') {
            let item = item.trim();
            let name = match item.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => item.rsplit("::").next().unwrap_or(item),
            };
            if !name.is_empty() {
                out.insert(name.to_string(), module.clone());
            }
        }
    }
    out
}

/// The modules a file's code reaches through `crate::`, with their line numbers: the module
/// named (`crate::job::..`), the module a root re-export comes from (`crate::Name`), and each
/// module of a group (`crate::{a, b::c}`).
fn used_modules(text: &str, reexports: &BTreeMap<String, String>) -> Vec<(usize, String)> {
    let text = code(text);
    let mut out = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        let line = text[..at].matches('\n').count() + 1;
        let rest = &text[at + "crate::".len()..];
        let names: Vec<String> = match rest.strip_prefix('{') {
            Some(group) => {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                group.split(',').map(|p| ident(p.trim())).collect()
            }
            None => vec![ident(rest)],
        };
        for name in names {
            let module = reexports.get(&name).cloned().unwrap_or(name);
            out.push((line, module));
        }
    }
    out
}

#[test]
fn runtime_modules_only_import_from_their_layer_or_below() {
    let rank: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let reexports = root_reexports(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut upward = Vec::new();
    let mut unranked = Vec::new();
    for path in all {
        let relative = path.strip_prefix(&src).unwrap();
        let module = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs"))
            .unwrap();
        if module == "lib" {
            continue; // the crate root re-exports every layer
        }
        let file = relative.file_name().and_then(|f| f.to_str()).unwrap_or("");
        if file == "tests.rs" || file.ends_with("_tests.rs") {
            continue; // unit-test files, compiled under `cfg(test)` only, like inline tests
        }
        let Some(&own) = rank.get(module) else {
            unranked.push(relative.display().to_string());
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, target) in used_modules(&text, &reexports) {
            if let Some(&theirs) = rank.get(target.as_str())
                && theirs > own
            {
                upward.push(format!(
                    "{}:{line}: {module} uses {target}",
                    relative.display()
                ));
            }
        }
    }
    assert!(
        unranked.is_empty(),
        "modules without a rank:\n{}",
        unranked.join("\n")
    );
    assert!(
        upward.is_empty(),
        "imports pointing up a layer:\n{}",
        upward.join("\n")
    );
}

/// The checks above see through the crate root and groups.
#[test]
fn root_reexports_and_groups_count_as_imports_of_their_module() {
    let lib = "pub use job::{\n    DEFAULT_MAX_PARALLELISM, JobConfig,\n};\n\
               pub use exchange::partitioner::Partitioner as Part;\n\
               pub mod prelude { pub use crate::{JobConfig}; }";
    let reexports = root_reexports(lib);
    assert_eq!(reexports["DEFAULT_MAX_PARALLELISM"], "job");
    assert_eq!(reexports["Part"], "exchange");
    assert_eq!(reexports["JobConfig"], "job");
    let file = "// crate::api in a comment\nuse crate::state::X;\nlet p = crate::DEFAULT_MAX_PARALLELISM;\n\
                use crate::{graph::Y, cluster};";
    assert_eq!(
        used_modules(file, &reexports),
        [
            (2, "state".to_string()),
            (3, "job".to_string()),
            (4, "graph".to_string()),
            (4, "cluster".to_string()),
        ]
    );
}
