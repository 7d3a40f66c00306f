//! The runtime's modules form layers, and imports only point down (ARCHITECTURE.md, "Layers"):
//! a module may use a module of its own layer's rank or below, never one above. Read from the
//! sources, so a new upward import fails here with the file and the line.

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
    ("api", 9),
    ("testing", 10),
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

#[test]
fn runtime_modules_only_import_from_their_layer_or_below() {
    let rank: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut upward = Vec::new();
    for path in all {
        let relative = path.strip_prefix(&src).unwrap();
        let module = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs"))
            .unwrap();
        let Some(&own) = rank.get(module) else {
            continue; // lib.rs: the crate root re-exports every layer
        };
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue; // documentation may link anywhere
            }
            for part in code.split("crate::").skip(1) {
                let target: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if let Some(&theirs) = rank.get(target.as_str())
                    && theirs > own
                {
                    upward.push(format!(
                        "{}:{}: {module} uses {target}",
                        relative.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports pointing up a layer:\n{}",
        upward.join("\n")
    );
}
