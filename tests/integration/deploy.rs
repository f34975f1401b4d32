//! The deploy files agree with what the workspace builds: the SAM template lints and names
//! the Lambda binaries, and every Vercel cron reaches a Vercel binary the way Vercel's Rust
//! builder finds it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::harness::workspace_root;

#[test]
fn cfn_lint_passes_on_the_sam_template() {
    let output = Command::new("cfn-lint")
        .arg("template.yaml")
        .current_dir(workspace_root())
        .output()
        .unwrap_or_else(|e| {
            panic!("cfn-lint is not installed ({e}): run `make tools` (pip install cfn-lint)")
        });
    assert!(
        output.status.success(),
        "cfn-lint template.yaml:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn sam_template_builds_every_lambda_binary() {
    let template =
        std::fs::read_to_string(workspace_root().join("template.yaml")).expect("template.yaml");
    let named: BTreeSet<String> = yaml_values(&template, "Binary").collect();
    let lambda_bins: BTreeSet<String> = bins()
        .into_iter()
        .filter(|b| !b.in_api())
        .map(|b| b.name)
        .collect();

    assert_eq!(
        lambda_bins,
        BTreeSet::from(["process_events".into(), "reap_leases".into()])
    );
    assert_eq!(named, lambda_bins, "template.yaml's Binary: entries");
    let methods: Vec<String> = yaml_values(&template, "BuildMethod").collect();
    assert_eq!(
        methods,
        vec!["rust-cargolambda"; named.len()],
        "one cargo-lambda build per function"
    );
}

/// Vercel's Rust builder, for an entry `api/x.rs`: runs `cargo locate-project` in `api/`,
/// looks in that manifest for a `[[bin]]` with the entry's path, else takes the file name
/// (`x`) as the binary's name; then `cargo build --bin x` at the project root.
#[test]
fn every_vercel_cron_reaches_a_vercel_binary() {
    let root = workspace_root();
    let vercel: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("vercel.json")).expect("vercel.json"),
    )
    .expect("vercel.json is JSON");
    let crons = vercel["crons"].as_array().expect("crons");
    let manifest = located_manifest(&root.join("api"));
    let bins = bins();

    let mut reached = BTreeSet::new();
    for cron in crons {
        let path = cron["path"].as_str().expect("cron path");
        let path = path.split('?').next().unwrap();
        let entry = root.join(format!("{}.rs", path.trim_start_matches('/')));
        assert!(
            path.starts_with("/api/") && entry.is_file(),
            "cron {path}: no entry file {}",
            entry.display()
        );
        assert!(
            !manifest.contains("[[bin]]"),
            "{} declares binaries: the builder would look there first; revisit this test",
            manifest
        );
        let name = entry.file_stem().unwrap().to_str().unwrap();
        let matching: Vec<&Bin> = bins.iter().filter(|b| b.name == name).collect();
        assert_eq!(
            matching.len(),
            1,
            "cron {path}: `cargo build --bin {name}` needs exactly one such binary"
        );
        assert_eq!(
            matching[0].src_path,
            entry.canonicalize().unwrap(),
            "cron {path}: bin {name} is built from another file"
        );
        assert!(
            matching[0].uses_vercel_runtime,
            "cron {path}: bin {name}'s package lacks vercel_runtime"
        );
        reached.insert(name.to_string());
    }
    let vercel_bins: BTreeSet<String> = bins
        .iter()
        .filter(|b| b.in_api())
        .map(|b| b.name.clone())
        .collect();
    assert_eq!(reached, vercel_bins, "every Vercel function has a cron");
    for key in vercel["functions"].as_object().expect("functions").keys() {
        assert!(
            root.join(key).is_file(),
            "vercel.json functions: {key} does not exist"
        );
    }
}

/// The manifest `cargo locate-project` finds from `dir`, as text.
fn located_manifest(dir: &Path) -> String {
    let output = cargo()
        .arg("locate-project")
        .current_dir(dir)
        .output()
        .expect("cargo locate-project");
    let located: Value =
        serde_json::from_slice(&output.stdout).expect("locate-project prints JSON");
    std::fs::read_to_string(located["root"].as_str().expect("root")).expect("read manifest")
}

/// One `[[bin]]` of the workspace.
struct Bin {
    name: String,
    src_path: PathBuf,
    uses_vercel_runtime: bool,
}

impl Bin {
    /// Whether Vercel sees it: its entry file is under `api/`.
    fn in_api(&self) -> bool {
        self.src_path
            .starts_with(workspace_root().join("api").canonicalize().unwrap())
    }
}

/// The binaries of the function packages (those under `functions/`), from `cargo metadata`.
fn bins() -> Vec<Bin> {
    let output = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata");
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    let functions = workspace_root().join("functions");
    let mut bins = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        if !Path::new(package["manifest_path"].as_str().unwrap()).starts_with(&functions) {
            continue;
        }
        let deps = package["dependencies"].as_array().unwrap();
        let uses_vercel_runtime = deps
            .iter()
            .any(|d| d["name"] == "vercel_runtime" && d["kind"].is_null());
        for target in package["targets"].as_array().unwrap() {
            if target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == "bin")
            {
                bins.push(Bin {
                    name: target["name"].as_str().unwrap().to_string(),
                    src_path: PathBuf::from(target["src_path"].as_str().unwrap())
                        .canonicalize()
                        .unwrap(),
                    uses_vercel_runtime,
                });
            }
        }
    }
    bins
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The values of every `key: value` line of a YAML text (enough for SAM's `Binary:` lines).
fn yaml_values<'a>(text: &'a str, key: &'a str) -> impl Iterator<Item = String> + 'a {
    text.lines().filter_map(move |line| {
        let (k, v) = line.trim().split_once(':')?;
        (k == key).then(|| v.trim().trim_matches('"').to_string())
    })
}
