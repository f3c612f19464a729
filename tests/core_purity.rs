//! The core must stay deterministic and steppable: no async runtime, no actix, no networking,
//! process, clock or OS-randomness API, in its dependencies or its source. A violation fails
//! here (and `clippy.toml` catches the std APIs at lint time).

#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Crates that would give the core IO, a clock, threads or OS randomness.
const FORBIDDEN_CRATES: &[&str] = &[
    "tokio",
    "actix",
    "actix-rt",
    "actix-web",
    "async-std",
    "smol",
    "mio",
    "hyper",
    "reqwest",
    "socket2",
    "futures",
    "futures-util",
    "getrandom",
    "libc",
    "nix",
    "rusqlite",
    "tracing-subscriber",
    "chrono",
];

/// Source fragments that mean the same.
const FORBIDDEN_SOURCE: &[&str] = &[
    "std::net",
    "std::process",
    "std::fs",
    "std::thread",
    "std::time::Instant",
    "SystemTime",
    "std::env",
    "HashMap",
    "HashSet",
    "thread_rng",
    "OsRng",
    "tokio",
    "actix",
    "getrandom",
];

#[test]
fn core_dependencies_are_pure() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes: BTreeMap<&str, &Value> =
        meta["resolve"]["nodes"].as_array().unwrap().iter().map(|n| (n["id"].as_str().unwrap(), n)).collect();
    let root = names.iter().find(|(_, name)| **name == "ftdrive").map(|(id, _)| *id).expect("the core package");

    let mut seen = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null());
            if normal {
                stack.push(dep["pkg"].as_str().unwrap());
            }
        }
    }
    let closure: BTreeSet<&str> = seen.iter().map(|id| names[id]).collect();
    let bad: Vec<&&str> = closure.iter().filter(|n| FORBIDDEN_CRATES.contains(n)).collect();
    assert!(bad.is_empty(), "the core depends on {bad:?} (whole closure: {closure:?})");
    assert!(closure.contains("serde"), "the walk found the core's real dependencies: {closure:?}");
}

#[test]
fn core_source_uses_no_io_clock_or_unordered_maps() {
    let mut offences = Vec::new();
    let mut files = 0;
    visit(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut |path, text| {
        files += 1;
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for word in FORBIDDEN_SOURCE {
                if code.contains(word) {
                    offences.push(format!("{}:{}: `{word}` in `{}`", path.display(), n + 1, code));
                }
            }
        }
    });
    assert!(files > 10, "scanned the core's sources ({files} files)");
    assert!(offences.is_empty(), "the core must stay pure:\n{}", offences.join("\n"));
}

fn visit(dir: &Path, f: &mut dyn FnMut(&Path, &str)) {
    for entry in std::fs::read_dir(dir).expect("readable source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            visit(&path, f);
        } else if path.extension().is_some_and(|e| e == "rs") {
            f(&path, &std::fs::read_to_string(&path).expect("readable source"));
        }
    }
}
