//! The layout as the docs give it, held to the code: lib.rs's `# Layout` names every module,
//! and ARCHITECTURE's module table names every file of the crate and says truly what each
//! module may import.

use std::collections::BTreeSet;
use std::path::Path;

const LIB: &str = include_str!("lib.rs");
const ARCHITECTURE: &str = include_str!("../../docs/ARCHITECTURE.md");

/// Every module lib.rs declares is named in its `# Layout`.
#[test]
fn the_layout_names_every_module() {
    let (doc, code) = LIB.split_at(LIB.find("\npub mod ").expect("modules"));
    for line in code.lines() {
        let line = line.trim();
        let Some(name) = line.strip_prefix("pub mod ").or(line.strip_prefix("mod ")) else {
            continue;
        };
        let name = name.trim_end_matches(';');
        if name == "layout_doc" {
            continue;
        }
        let named = doc.contains(&format!("[`{name}`]")) || doc.contains(&format!("`{name}`"));
        assert!(named, "lib.rs's # Layout does not name `{name}`");
    }
}

/// One row of ARCHITECTURE's table of the crate's modules.
struct Row {
    /// `queue/`, `cancel.rs`, `bin/event-bridge/`.
    module: String,
    owns: String,
    may_import: Option<BTreeSet<String>>,
}

fn rows() -> Vec<Row> {
    let start = ARCHITECTURE
        .find("### `shared/`")
        .expect("ARCHITECTURE has the shared crate's module table");
    (ARCHITECTURE[start..].lines())
        .skip_while(|l| !l.starts_with('|'))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            let module = cells[0].trim();
            let module = module[1..]
                .split('`')
                .next()
                .unwrap_or_default()
                .to_string();
            let may = cells.get(2).map_or("", |c| c.trim());
            let may_import = (!may.starts_with("everything")).then(|| {
                outside_parentheses(may)
                    .map(|m| m.split([' ', '(']).next().unwrap_or_default().to_string())
                    .filter(|m| !m.is_empty() && m != "nothing")
                    .collect()
            });
            Row {
                module,
                owns: cells.get(1).unwrap_or(&"").to_string(),
                may_import,
            }
        })
        .collect()
}

/// The items of a list `a, b (c, d), e`: its commas outside parentheses split it.
fn outside_parentheses(list: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0_i32;
    list.split(move |c: char| {
        depth += match c {
            '(' => 1,
            ')' => -1,
            _ => 0,
        };
        c == ',' && depth == 0
    })
    .map(str::trim)
}

/// The `.rs` files under `dir`, as paths relative to it.
fn files(dir: &Path, under: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("a directory of the crate") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files(&path, under, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(under).expect("under it");
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every file and folder of the crate has its row, and a folder's row names each of its files.
#[test]
fn the_module_table_names_every_file() {
    let rows = rows();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(src()).expect("src") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .to_string();
        let module = if path.is_dir() {
            format!("{name}/")
        } else {
            name.clone()
        };
        if ["lib.rs", "proptests.rs", "layout_doc.rs", "bin/"].contains(&module.as_str()) {
            continue;
        }
        let Some(row) = rows.iter().find(|r| r.module == module) else {
            missing.push(format!("no row for `{module}`"));
            continue;
        };
        if !path.is_dir() {
            continue;
        }
        let mut inside = Vec::new();
        files(&path, &path, &mut inside);
        for file in inside.iter().filter(|f| !f.ends_with("tests.rs")) {
            let base = file.rsplit('/').next().unwrap_or(file);
            // A folder's own `mod.rs` is named as such; a sub-folder's by the sub-folder.
            let folder = file.strip_suffix("/mod.rs").map(|f| format!("`{f}/`"));
            let sub = file.rsplit_once('/').map(|(dir, _)| format!("`{dir}/`"));
            let named = row.owns.contains(&format!("`{file}`"))
                || (row.owns.contains(&format!("`{base}`"))
                    && sub.is_none_or(|dir| row.owns.contains(&dir)))
                || folder.is_some_and(|f| row.owns.contains(&f));
            if !named {
                missing.push(format!("`{module}`'s row does not name `{file}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE's module table: {missing:#?}"
    );
}

/// What each module imports of the crate is among what its row says it may import.
#[test]
fn modules_import_only_what_the_table_allows() {
    let mut wrong = Vec::new();
    for row in rows() {
        let Some(allowed) = &row.may_import else {
            continue;
        };
        let own = row
            .module
            .trim_end_matches('/')
            .trim_end_matches(".rs")
            .to_string();
        let path = src().join(&row.module);
        let mut inside = Vec::new();
        match path.is_dir() {
            true => files(&path, &src(), &mut inside),
            false => inside.push(row.module.clone()),
        }
        for file in inside {
            let text = std::fs::read_to_string(src().join(&file)).expect("a file");
            // A name of the root itself (`crate::registered_features`) is no module.
            let module = |name: &str| {
                src().join(format!("{name}.rs")).is_file() || src().join(name).is_dir()
            };
            for used in imports(&text).into_iter().filter(|u| module(u)) {
                if used != own && !allowed.contains(&used) {
                    wrong.push(format!(
                        "{file} imports crate::{used}, not in `{}`'s row",
                        row.module
                    ));
                }
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE's may-import column: {wrong:#?}"
    );
}

/// The table's rows are in an order where each row's may-import column names only rows below
/// it, so the column has no cycle. (That the column says what the code imports, and that the
/// code has no cycle in any folder, is `tests/module_graph.rs`'s.)
#[test]
fn each_row_may_import_only_rows_below_it() {
    let rows = rows();
    let name = |row: &Row| {
        let module = row.module.trim_end_matches('/').trim_end_matches(".rs");
        module.to_string()
    };
    let order: Vec<String> = rows.iter().map(name).collect();
    let mut wrong = Vec::new();
    for (at, row) in rows.iter().enumerate() {
        for module in row.may_import.iter().flatten() {
            match order.iter().position(|m| m == module) {
                Some(below) if below > at => {}
                Some(_) => wrong.push(format!(
                    "`{}` may import `{module}`, a row above it",
                    row.module
                )),
                None => wrong.push(format!(
                    "`{}` may import `{module}`, which has no row",
                    row.module
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE's may-import column: {wrong:#?}"
    );
}

/// The crate's top-level modules `text` names (`crate::x`, `use crate::{x, …}`), outside its
/// tests and comments.
fn imports(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut found = BTreeSet::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(list) => list
                    .split('}')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = (name.trim().chars())
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name.chars().next().is_some_and(|c| c.is_lowercase()) {
                    found.insert(name);
                }
            }
        }
    }
    found
}

/// Each step of ARCHITECTURE's "One scheduled run" names a file that exists and a function
/// that file defines, and the count of files it gives is the count of files it names.
#[test]
fn the_one_run_section_names_real_functions() {
    let start = ARCHITECTURE
        .find("## One scheduled run")
        .expect("the section");
    let section = &ARCHITECTURE[start..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = BTreeSet::new();
    let mut steps = 0;
    for step in section.lines().filter(|l| l.starts_with(char::is_numeric)) {
        // `1. `path`, `Type::function`: …`
        let mut quoted = step.split('`').skip(1).step_by(2);
        let (Some(path), Some(function)) = (quoted.next(), quoted.next()) else {
            continue;
        };
        if !path.contains('/') {
            continue; // "Back in `run_with`": a step named already.
        }
        steps += 1;
        let text = std::fs::read_to_string(root.join(path))
            .unwrap_or_else(|e| panic!("step {step:?}: {path}: {e}"));
        let name = function.rsplit("::").next().expect("a name");
        assert!(
            text.contains(&format!("fn {name}(")) || text.contains(&format!("fn {name}<")),
            "step {step:?}: {path} defines no `{name}`"
        );
        files.insert(path);
    }
    assert!(steps >= 15, "the section's steps were not found ({steps})");
    let words = [
        "Twelve",
        "Thirteen",
        "Fourteen",
        "Fifteen",
        "Sixteen",
        "Seventeen",
    ];
    let said = words
        .iter()
        .position(|w| section.contains(&format!("{w} files are named here")))
        .map(|i| i + 12)
        .expect("the section says how many files it names");
    assert_eq!(said, files.len(), "files named: {files:?}");
}

/// Each transition's performer (`Transition::performed_by`, the table ARCHITECTURE holds equal
/// to it) is a function of the crate: `Type::function` defined in a file that implements
/// `Type`, `module::function` in that module's file or folder. Renaming or removing one fails here.
#[test]
fn every_transition_is_performed_by_a_function_the_crate_defines() {
    let mut sources = Vec::new();
    files(&src(), &src(), &mut sources);
    let texts: Vec<(String, String)> = (sources.into_iter())
        .map(|file| {
            let text = std::fs::read_to_string(src().join(&file)).expect("a file");
            (file, text)
        })
        .collect();
    let defines = |text: &str, name: &str| {
        text.contains(&format!("fn {name}(")) || text.contains(&format!("fn {name}<"))
    };
    let mut missing = Vec::new();
    for transition in crate::state::Transition::ALL {
        for performer in transition.performed_by().split(", ") {
            let (owner, name) = performer.split_once("::").expect("owner::function");
            let found = texts.iter().any(|(file, text)| {
                let owned = match owner.starts_with(char::is_uppercase) {
                    // `impl Type {`, `impl<…> Type<…> {`
                    true => text.lines().any(|line| {
                        line.starts_with("impl")
                            && (line.contains(&format!(" {owner} "))
                                || line.contains(&format!(" {owner}<")))
                    }),
                    // The module's file, or a file of its folder wherever it is.
                    false => {
                        *file == format!("{owner}.rs")
                            || file.starts_with(&format!("{owner}/"))
                            || file.contains(&format!("/{owner}/"))
                    }
                };
                owned && defines(text, name)
            });
            if !found {
                missing.push(format!("{}: {performer}", transition.name()));
            }
        }
    }
    assert!(missing.is_empty(), "performers not found: {missing:#?}");
}
