//! Comparing the two engines' results row for row.
//!
//! Both sides write one file per sink subtask, each line a JSON array of the row's columns;
//! Flink's lines start with the row kind and a tab (`+I`, `-U`, `+U`, `-D`: its changelog).
//! [`materialize`] reads a directory into the final result as a sorted multiset of rows: an
//! insert or update-after adds a row, a retraction or delete removes one, so an updating result
//! (q4's averages per category, q9's winning bid per auction) is compared by what it finally
//! holds, whatever order the changes came in. Numbers with a fraction are compared to three
//! decimals (q1's `0.908 * price` is exact in Flink's `DECIMAL(23, 3)` and an `f64` in sluice);
//! everything else exactly.

use anyhow::{Context, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// Whether the engines agree on a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// The same rows.
    Agree,
    /// Different rows, and how.
    Disagree(String),
    /// Not compared, and why.
    NotApplicable(String),
}

/// A row as a canonical string: fractional numbers to three decimals.
fn canonical(row: &Value) -> String {
    fn put(out: &mut String, v: &Value) {
        match v {
            Value::Number(n) if n.is_f64() => {
                let _ = write!(out, "{:.3}", n.as_f64().unwrap_or(f64::NAN));
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    put(out, item);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    put(&mut out, row);
    out
}

/// The final result of an upsert stream in `dir`: per key (the first column) the last row of
/// its file (all rows of a key come from the one subtask that holds the key), sorted.
pub fn materialize_upserts(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        let file =
            std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        for (n, line) in BufReader::new(file).lines().enumerate() {
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            if line.is_empty() {
                continue;
            }
            let row: Value = serde_json::from_str(&line)
                .with_context(|| format!("{}:{}: not a JSON row", path.display(), n + 1))?;
            let key = row.get(0).map(canonical).unwrap_or_default();
            last.insert(key, canonical(&row));
        }
    }
    let mut rows: Vec<String> = last.into_values().collect();
    rows.sort();
    Ok(rows)
}

/// The final result in `dir`: every row as many times as it is held at the end, sorted.
pub fn materialize(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        let file =
            std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        for (n, line) in BufReader::new(file).lines().enumerate() {
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            if line.is_empty() {
                continue;
            }
            let (delta, json) = match line.split_once('\t') {
                Some(("+I" | "+U", json)) => (1, json),
                Some(("-U" | "-D", json)) => (-1, json),
                Some((kind, _)) => bail!("{}:{}: unknown row kind {kind:?}", path.display(), n + 1),
                None => (1, line.as_str()),
            };
            let row: Value = serde_json::from_str(json)
                .with_context(|| format!("{}:{}: not a JSON row", path.display(), n + 1))?;
            *counts.entry(canonical(&row)).or_default() += delta;
        }
    }
    let mut rows = Vec::new();
    for (row, count) in counts {
        if count < 0 {
            bail!(
                "{}: row {row} retracted more often than inserted",
                dir.display()
            );
        }
        rows.extend(std::iter::repeat_n(row, count as usize));
    }
    Ok(rows)
}

/// Compares two materialized results: equal, or a description of the first differences.
pub fn compare_rows(sluice: &[String], flink: &[String]) -> Agreement {
    if sluice == flink {
        return Agreement::Agree;
    }
    let (mut i, mut j) = (0, 0);
    let (mut only_sluice, mut only_flink) = (Vec::new(), Vec::new());
    let (mut n_sluice, mut n_flink) = (0usize, 0usize);
    while i < sluice.len() || j < flink.len() {
        match (sluice.get(i), flink.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                n_sluice += 1;
                if only_sluice.len() < 2 {
                    only_sluice.push(a.clone());
                }
                i += 1;
            }
            (Some(a), None) => {
                n_sluice += 1;
                if only_sluice.len() < 2 {
                    only_sluice.push(a.clone());
                }
                i += 1;
            }
            (_, Some(b)) => {
                n_flink += 1;
                if only_flink.len() < 2 {
                    only_flink.push(b.clone());
                }
                j += 1;
            }
            (None, None) => break,
        }
    }
    Agreement::Disagree(format!(
        "sluice {} rows, Flink {}: {n_sluice} only in sluice (e.g. {}), {n_flink} only in Flink \
         (e.g. {})",
        sluice.len(),
        flink.len(),
        only_sluice.join(" "),
        only_flink.join(" ")
    ))
}

/// Materializes both directories (sluice's as an upsert stream when `sluice_upserts`) and
/// compares them.
pub fn compare_dirs(
    sluice: &Path,
    sluice_upserts: bool,
    flink: &Path,
) -> anyhow::Result<Agreement> {
    let ours = if sluice_upserts {
        materialize_upserts(sluice)?
    } else {
        materialize(sluice)?
    };
    Ok(compare_rows(&ours, &materialize(flink)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changelogs_materialize_and_fractions_compare_to_three_decimals() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("part-0"),
            "+I\t[10,5]\n-U\t[10,5]\n+U\t[10,7]\n+I\t[11,1.135]\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("part-1"), "+I\t[12,\"a b\",null]\n").unwrap();
        let flink = materialize(dir.path()).unwrap();
        assert_eq!(flink, ["[10,7]", "[11,1.135]", "[12,\"a b\",null]"]);

        let other = tempfile::tempdir().unwrap();
        std::fs::write(
            other.path().join("part-0"),
            "[12,\"a b\",null]\n[11,1.1349999999]\n[10,7]\n",
        )
        .unwrap();
        let sluice = materialize(other.path()).unwrap();
        assert_eq!(compare_rows(&sluice, &flink), Agreement::Agree);

        let missing = &flink[..2];
        match compare_rows(missing, &flink) {
            Agreement::Disagree(why) => assert!(why.contains("1 only in Flink"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_retraction_without_its_row_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part-0"), "-D\t[1]\n").unwrap();
        assert!(materialize(dir.path()).is_err());
    }
}
