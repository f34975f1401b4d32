//! The crate's module graph has no cycle: in every folder, its modules can be put in an order
//! where each names only modules after it.
//!
//! # The graph
//!
//! The nodes are the modules of a crate (the library `event_bridge` from `src/lib.rs`, and the
//! command from `src/bin/event-bridge/main.rs`, a crate of its own), found by following `mod`
//! declarations from the crate's root, whatever `cfg` they sit under. A module's children are
//! the modules it declares; the children of one module are *siblings*, and each folder (a
//! module with children, the crate's root included) has its own graph over its children.
//!
//! A sibling `A` has an edge to its sibling `B` when anything inside `A` (its file, the files
//! of its children at any depth, inline modules such as its tests) names `B` or something
//! inside `B`: through a path that starts with `crate::`, `super::` or `self::`, through a
//! name a `use` brought in (`use super::end;` then `end::Kind`), or through a child's name
//! written plainly (`claim::run` in `queue/mod.rs`). Paths are read where the compiler reads
//! them (items, types, expressions, patterns, `use`s, also inside functions), inside macro
//! calls (`matches!(x, crate::state::State::Done)`), and in attributes, as tokens
//! (`#[error("{}", crate::quoted::clipped(key))]`) or in strings
//! (`deserialize_with = "crate::progress::lenient"`); doc comments are not read.
//!
//! A `use` is an edge of the module it is written in, whether it is `pub` or not: a re-export
//! in `queue/mod.rs` (`pub use crate::task::Task`) is an edge from `queue` to `task`, and
//! whoever names `crate::queue::Task` has an edge to `queue`. A module naming its own
//! ancestors (`super::Queue`, `crate::Config`) or its own descendants draws no edge, with one
//! exception: when the item it names in an ancestor is only a `use` there (`crate::Error`,
//! re-exported by `lib.rs` from `error`), the path is followed to where that `use` points, so
//! an edge cannot hide behind a parent's re-export.
//!
//! # The check
//!
//! A folder passes when its graph has a topological order. When one has none, the test prints
//! its strongly connected parts and, for each edge inside one, the shortest cycle through it:
//! the modules in order, each edge with the file and line of the first place that draws it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use petgraph::algo::{astar, tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::NodeFiltered;
use proc_macro2::{Span, TokenStream, TokenTree};
use syn::visit::Visit;

/// A module's path from its crate's root: `["queue", "claim"]` for `crate::queue::claim`.
type ModPath = Vec<String>;

/// Where a name is written: a file (from the crate's `src/`) and a line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct At {
    file: String,
    line: usize,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A path as written in a module, before it is resolved.
struct Written {
    segments: Vec<String>,
    /// Written in a `use`, where the last segment may be a module; elsewhere it names an item.
    in_use: bool,
    at: At,
}

/// What one module declares and names.
#[derive(Default)]
struct Module {
    children: BTreeSet<String>,
    /// Items it defines (structs, functions, …): a name found here is no glob's.
    defined: BTreeSet<String>,
    /// Names its `use`s bring in, to the path as written.
    aliases: BTreeMap<String, Vec<String>>,
    /// The paths of its glob `use`s, as written.
    globs: Vec<Vec<String>>,
    written: Vec<Written>,
}

/// The source files of a crate: on disk, or made up by a test.
trait Files {
    fn read(&self, file: &str) -> Option<String>;
}

struct Disk(PathBuf);

impl Files for Disk {
    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.0.join(file)).ok()
    }
}

impl Files for BTreeMap<&str, &str> {
    fn read(&self, file: &str) -> Option<String> {
        self.get(file).map(|text| text.to_string())
    }
}

/// A crate's modules, each with what it declares and names.
#[derive(Default)]
struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

/// Reads the crate whose root is `root` (`lib.rs`, `bin/event-bridge/main.rs`), following its
/// `mod` declarations.
fn load(files: &impl Files, root: &str) -> Crate {
    let mut krate = Crate::default();
    let dir = root.rsplit_once('/').map_or("", |(dir, _)| dir);
    load_file(files, root, dir, Vec::new(), &mut krate);
    krate
}

fn load_file(files: &impl Files, file: &str, dir: &str, module: ModPath, krate: &mut Crate) {
    let text = files
        .read(file)
        .unwrap_or_else(|| panic!("{file}: not found"));
    let syntax = syn::parse_file(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    load_items(files, file, dir, module, &syntax.items, krate);
}

/// Loads the items of `module`, written in `file`; its children's files are under `dir`.
fn load_items(
    files: &impl Files,
    file: &str,
    dir: &str,
    module: ModPath,
    items: &[syn::Item],
    krate: &mut Crate,
) {
    krate.modules.entry(module.clone()).or_default();
    for item in items {
        if let syn::Item::Mod(declared) = item {
            load_child(files, file, dir, &module, declared, krate);
            continue;
        }
        let entry = krate.modules.get_mut(&module).expect("made above");
        if let Some(name) = defined_name(item) {
            entry.defined.insert(name);
        }
        Collector {
            file,
            module: entry,
        }
        .visit_item(item);
    }
}

fn load_child(
    files: &impl Files,
    file: &str,
    dir: &str,
    module: &ModPath,
    declared: &syn::ItemMod,
    krate: &mut Crate,
) {
    let name = declared.ident.to_string();
    assert!(
        !declared.attrs.iter().any(|a| a.path().is_ident("path")),
        "{file}: `mod {name}` has a #[path]: the module graph test does not follow it"
    );
    let entry = krate.modules.get_mut(module).expect("made by the caller");
    entry.children.insert(name.clone());
    let mut child = module.clone();
    child.push(name.clone());
    let child_dir = join(dir, &name);
    if let Some((_, items)) = &declared.content {
        return load_items(files, file, &child_dir, child, items, krate);
    }
    let flat = join(dir, &format!("{name}.rs"));
    let nested = join(&child_dir, "mod.rs");
    let found = [flat, nested]
        .into_iter()
        .find(|f| files.read(f).is_some())
        .unwrap_or_else(|| panic!("{file}: no file for `mod {name}`"));
    load_file(files, &found, &child_dir, child, krate);
}

fn join(dir: &str, name: &str) -> String {
    match dir {
        "" => name.to_string(),
        _ => format!("{dir}/{name}"),
    }
}

/// The name an item defines in its module's namespace, if any.
fn defined_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Gathers the paths written in items of one module.
struct Collector<'a> {
    file: &'a str,
    module: &'a mut Module,
}

impl Collector<'_> {
    fn write(&mut self, segments: Vec<String>, in_use: bool, span: Span) {
        let at = At {
            file: self.file.to_string(),
            line: span.start().line,
        };
        (self.module.written).push(Written {
            segments,
            in_use,
            at,
        });
    }

    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        let with = |name: &syn::Ident| {
            let mut path = prefix.to_vec();
            path.push(name.to_string());
            path
        };
        match tree {
            syn::UseTree::Path(p) => self.use_tree(&with(&p.ident), &p.tree),
            syn::UseTree::Name(n) if n.ident == "self" => {
                let name = prefix.last().cloned().unwrap_or_default();
                self.alias(name, prefix.to_vec(), n.ident.span());
            }
            syn::UseTree::Name(n) => {
                self.alias(n.ident.to_string(), with(&n.ident), n.ident.span())
            }
            syn::UseTree::Rename(r) => {
                let path = if r.ident == "self" {
                    prefix.to_vec()
                } else {
                    with(&r.ident)
                };
                self.alias(r.rename.to_string(), path, r.rename.span());
            }
            syn::UseTree::Glob(g) => {
                self.module.globs.push(prefix.to_vec());
                self.write(prefix.to_vec(), true, g.star_token.spans[0]);
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    fn alias(&mut self, name: String, path: Vec<String>, span: Span) {
        if name != "_" {
            self.module.aliases.insert(name, path.clone());
        }
        self.write(path, true, span);
    }

    /// Paths in tokens no grammar is known for (a macro's input): each run of `name::name…`.
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => self.tokens(group.stream()),
                TokenTree::Ident(first) if !colons_at(&tokens, i.wrapping_sub(2)) => {
                    let mut segments = vec![first.to_string()];
                    while colons_at(&tokens, i + 1) {
                        let TokenTree::Ident(next) = &tokens[i + 3] else {
                            break;
                        };
                        segments.push(next.to_string());
                        i += 3;
                    }
                    if segments.len() > 1 {
                        self.write(segments, false, first.span());
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// Whether `tokens[at]` and `tokens[at + 1]` are `::` followed by a name.
fn colons_at(tokens: &[TokenTree], at: usize) -> bool {
    let punct = |i: usize| matches!(tokens.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':');
    punct(at) && punct(at + 1) && matches!(tokens.get(at + 2), Some(TokenTree::Ident(_)))
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.write(segments, false, path.segments[0].ident.span());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_none() {
            self.use_tree(&[], &item.tree);
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.tokens(mac.tokens.clone());
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        if attr.path().is_ident("doc") {
            return;
        }
        let syn::Meta::List(list) = &attr.meta else {
            return;
        };
        self.tokens(list.tokens.clone());
        for token in list.tokens.clone().into_iter().flat_map(flatten) {
            let TokenTree::Literal(literal) = token else {
                continue;
            };
            let Ok(text) = syn::parse_str::<syn::LitStr>(&literal.to_string()) else {
                continue;
            };
            let Ok(path) = syn::parse_str::<syn::Path>(&text.value()) else {
                continue;
            };
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.write(segments, false, literal.span());
        }
    }
}

fn flatten(token: TokenTree) -> Vec<TokenTree> {
    match token {
        TokenTree::Group(group) => group.stream().into_iter().flat_map(flatten).collect(),
        other => vec![other],
    }
}

/// Where resolution stops following names: deeper than this is a loop of `use`s.
const DEPTH: usize = 16;

impl Crate {
    /// The absolute path of `segments` as written in `module`, or `None` for a path outside
    /// the crate (std, other crates) or a name of the module's own (a local item, a variable).
    fn resolve(&self, module: &ModPath, segments: &[String], depth: usize) -> Option<Vec<String>> {
        if depth > DEPTH {
            return None;
        }
        let (first, rest) = segments.split_first()?;
        let mut rest = rest;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" => module.clone(),
            "super" => {
                let mut base = module.clone();
                base.pop()?;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                base
            }
            name => self.name_in(module, name, depth)?,
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// What a plain `name` means in `module`: a child, a `use`'s name, or a glob's.
    fn name_in(&self, module: &ModPath, name: &str, depth: usize) -> Option<Vec<String>> {
        let here = self.modules.get(module)?;
        if here.children.contains(name) {
            let mut path = module.clone();
            path.push(name.to_string());
            return Some(path);
        }
        if let Some(target) = here.aliases.get(name) {
            return self.resolve(module, target, depth + 1);
        }
        if here.defined.contains(name) {
            return None;
        }
        here.globs.iter().find_map(|glob| {
            let source = self.resolve(module, glob, depth + 1)?;
            self.name_in(&source, name, depth + 1)
        })
    }

    /// The module a resolved `path` names: its longest prefix that is a module (for a path
    /// outside a `use`, short of its last segment, which names an item). A path to an item of
    /// an ancestor of `from` that the ancestor does not define is followed through the
    /// ancestor's `use`s.
    fn target(&self, from: &ModPath, path: Vec<String>, in_use: bool, depth: usize) -> ModPath {
        let module = self.module_prefix(&path, in_use);
        let Some(item) = path.get(module.len()) else {
            return module;
        };
        let owner = &self.modules[&module];
        if depth > DEPTH || !from.starts_with(&module) || owner.defined.contains(item) {
            return module;
        }
        match self.name_in(&module, item, depth + 1) {
            Some(mut followed) if !owner.children.contains(item) => {
                followed.extend(path[module.len() + 1..].iter().cloned());
                self.target(from, followed, in_use, depth + 1)
            }
            _ => module,
        }
    }

    fn module_prefix(&self, path: &[String], in_use: bool) -> ModPath {
        let upto = if in_use {
            path.len()
        } else {
            path.len().saturating_sub(1)
        };
        (0..=upto)
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|prefix| self.modules.contains_key(prefix))
            .unwrap_or_default()
    }

    /// Every folder's edges: folder → (sibling → sibling) → where each is drawn.
    fn edges(&self) -> BTreeMap<ModPath, BTreeMap<(String, String), Vec<At>>> {
        let mut edges: BTreeMap<_, BTreeMap<_, Vec<At>>> = BTreeMap::new();
        for (from, module) in &self.modules {
            for written in &module.written {
                let Some(path) = self.resolve(from, &written.segments, 0) else {
                    continue;
                };
                let to = self.target(from, path, written.in_use, 0);
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue; // a module naming itself, an ancestor or a descendant
                }
                let pair = (from[common].clone(), to[common].clone());
                let folder = from[..common].to_vec();
                let places = edges.entry(folder).or_default().entry(pair).or_default();
                places.push(written.at.clone());
            }
        }
        for folder in edges.values_mut() {
            for places in folder.values_mut() {
                places.sort();
                places.dedup();
            }
        }
        edges
    }
}

/// The cycles of one folder's graph: for each edge inside a strongly connected part, the
/// shortest cycle through it, as the modules in order (the first again at the end).
fn cycles(edges: &BTreeMap<(String, String), Vec<At>>) -> Vec<Vec<String>> {
    let mut graph = DiGraph::<String, ()>::new();
    let mut nodes: BTreeMap<String, NodeIndex> = BTreeMap::new();
    let mut node = |graph: &mut DiGraph<String, ()>, name: &String| {
        *nodes
            .entry(name.clone())
            .or_insert_with(|| graph.add_node(name.clone()))
    };
    for (from, to) in edges.keys() {
        let (a, b) = (node(&mut graph, from), node(&mut graph, to));
        graph.add_edge(a, b, ());
    }
    if toposort(&graph, None).is_ok() {
        return Vec::new();
    }
    let mut found = BTreeSet::new();
    for part in tarjan_scc(&graph).into_iter().filter(|p| p.len() > 1) {
        let inside = NodeFiltered::from_fn(&graph, |n| part.contains(&n));
        for edge in graph.edge_indices() {
            let (a, b) = graph.edge_endpoints(edge).expect("an edge");
            if !part.contains(&a) || !part.contains(&b) {
                continue;
            }
            let (_, back) = astar(&inside, b, |n| n == a, |_| 1, |_| 0).expect("a path back");
            let mut cycle: Vec<String> = std::iter::once(a)
                .chain(back)
                .map(|n| graph[n].clone())
                .collect();
            cycle.pop(); // `a` again
            let start = (0..cycle.len())
                .min_by_key(|&i| &cycle[i])
                .expect("a module");
            cycle.rotate_left(start);
            cycle.push(cycle[0].clone());
            found.insert(cycle);
        }
    }
    found.into_iter().collect()
}

/// Every cycle of every folder, each line a cycle with where each of its edges is drawn.
fn report(krate: &Crate) -> BTreeMap<String, Vec<String>> {
    let mut report = BTreeMap::new();
    for (folder, edges) in krate.edges() {
        let cycles = cycles(&edges);
        if cycles.is_empty() {
            continue;
        }
        let lines = cycles
            .iter()
            .map(|cycle| {
                let mut line = cycle[0].clone();
                for pair in cycle.windows(2) {
                    let places = &edges[&(pair[0].clone(), pair[1].clone())];
                    let more = match places.len() {
                        1 => String::new(),
                        n => format!(" and {} more", n - 1),
                    };
                    write!(line, " -> {} ({}{more})", pair[1], places[0]).expect("a string");
                }
                line
            })
            .collect();
        let name = match folder.is_empty() {
            true => "crate".to_string(),
            false => format!("crate::{}", folder.join("::")),
        };
        report.insert(name, lines);
    }
    report
}

fn check(root: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let krate = load(&Disk(src), root);
    assert!(krate.modules.len() > 1, "{root}: no modules were found");
    let report = report(&krate);
    let mut text = String::new();
    for (folder, cycles) in &report {
        writeln!(text, "{folder}: {} cycles", cycles.len()).expect("a string");
        for cycle in cycles {
            writeln!(text, "  {cycle}").expect("a string");
        }
    }
    assert!(
        report.is_empty(),
        "{root}: the module graph has cycles (each: a module, then each module it names, \
         with the first file and line that names it):\n{text}"
    );
}

#[test]
fn the_library_has_no_cycle() {
    check("lib.rs");
}

#[test]
fn the_command_has_no_cycle() {
    check("bin/event-bridge/main.rs");
}

/// The top-level modules `from` names, directly or through the modules it names, in a crate
/// whose root is `lib.rs` read from `files`.
fn reached(files: &impl Files, from: &str) -> BTreeSet<String> {
    walk(files, from, |(a, b)| (a.as_str(), b))
}

/// The top-level modules from which `to` can be reached along the imports.
fn reaching(files: &impl Files, to: &str) -> BTreeSet<String> {
    walk(files, to, |(a, b)| (b.as_str(), a))
}

/// The modules met from `start` along the top-level edges, each edge read by `step` as
/// (where it leaves, where it goes).
fn walk(
    files: &impl Files,
    start: &str,
    step: impl Fn(&(String, String)) -> (&str, &String),
) -> BTreeSet<String> {
    let edges = load(files, "lib.rs").edges();
    let top = edges.get(&Vec::new()).cloned().unwrap_or_default();
    let mut met = BTreeSet::new();
    let mut next = vec![start.to_string()];
    while let Some(module) = next.pop() {
        for (_, to) in top.keys().map(&step).filter(|(at, _)| *at == module) {
            if met.insert(to.clone()) {
                next.push(to.clone());
            }
        }
    }
    met
}

/// The hook interface (`feature/`) names nothing of the features (`features/`), not even
/// through another module: the core's side of the wall never depends on a feature.
#[test]
fn the_hook_interface_reaches_nothing_of_the_features() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let reached = reached(&Disk(src), "feature");
    assert!(
        !reached.contains("features"),
        "feature/ reaches features/ through {reached:?}"
    );
}

/// The doors that may name a feature: the tools over the queue that show or drive one (the
/// dashboard lists the schedules, the worker runs their timer, `cancel` marks a held task).
/// Nothing else may.
const DOORS: &[&str] = &["cancel", "dashboard", "worker"];

/// No module of the library but `features/` itself and the [`DOORS`] reaches `features/`, not
/// even through another module: the features are wired in at the crate's root (`lib.rs`, the
/// lists in `features/mod.rs`), so the core and the run build and run without naming any of
/// them, and no module of theirs leans on a door.
#[test]
fn no_module_but_the_features_and_the_doors_reaches_a_feature() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = Disk(src);
    let naming = modules_naming(&files, "features");
    let outside: Vec<&String> = (naming.keys())
        .filter(|m| !DOORS.contains(&m.as_str()))
        .collect();
    assert!(
        outside.is_empty(),
        "modules naming features/ (only the doors may): {outside:?} ({naming:?})"
    );
    let through: Vec<String> = reaching(&files, "features")
        .into_iter()
        .filter(|m| m != "features" && !DOORS.contains(&m.as_str()))
        .collect();
    assert!(
        through.is_empty(),
        "modules reaching features/ through a door: {through:?}"
    );
}

#[test]
fn a_module_that_reaches_a_feature_through_a_door_is_seen() {
    let files: BTreeMap<&str, &str> = [
        ("lib.rs", "mod queue;\nmod dashboard;\nmod features;\n"),
        ("queue.rs", "fn show() { crate::dashboard::page(); }\n"),
        (
            "dashboard.rs",
            "pub fn page() { crate::features::all(); }\n",
        ),
        ("features.rs", "pub fn all() {}\n"),
    ]
    .into_iter()
    .collect();
    let reaching = reaching(&files, "features");
    assert!(reaching.contains("queue") && reaching.contains("dashboard"));
}

/// The top-level modules with an edge to `to`, with the file and line of one edge each.
fn modules_naming(files: &impl Files, to: &str) -> BTreeMap<String, String> {
    let edges = load(files, "lib.rs").edges();
    let top = edges.get(&Vec::new()).cloned().unwrap_or_default();
    (top.iter())
        .filter(|((from, target), _)| target == to && from != to)
        .map(|((from, _), at)| (from.clone(), format!("{at:?}")))
        .collect()
}

#[test]
fn a_core_module_naming_a_feature_is_seen() {
    let files: BTreeMap<&str, &str> = [
        (
            "lib.rs",
            "mod queue;\nmod features;\nfn wired() { features::all(); }\n",
        ),
        ("queue.rs", "fn new() { crate::features::all(); }\n"),
        ("features.rs", "pub fn all() {}\n"),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        modules_naming(&files, "features")
            .into_keys()
            .collect::<Vec<_>>(),
        ["queue"]
    );
}

#[test]
fn an_interface_that_reaches_a_feature_through_another_module_is_seen() {
    let files: BTreeMap<&str, &str> = [
        ("lib.rs", "mod feature;\nmod features;\nmod task;\n"),
        ("feature.rs", "use crate::task::Envelope;\n"),
        ("task.rs", "pub struct Envelope(crate::features::Expiry);\n"),
        ("features.rs", "pub struct Expiry;\n"),
    ]
    .into_iter()
    .collect();
    assert!(reached(&files, "feature").contains("features"));
    assert!(!reached(&files, "features").contains("feature"));
}

/// ARCHITECTURE's module table of the crate: each top-level module's row, with the modules its
/// "May import" column names (`None` for "everything public below").
fn architecture_rows() -> BTreeMap<String, Option<BTreeSet<String>>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ARCHITECTURE.md");
    let text = std::fs::read_to_string(path).expect("docs/ARCHITECTURE.md");
    let start = text
        .find("### `shared/`")
        .expect("the crate's module table");
    let rows = (text[start..].lines())
        .skip_while(|l| !l.starts_with('|'))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    rows.map(|row| {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
        let module = cells[0].trim().split('`').nth(1).unwrap_or_default();
        let module = module.trim_end_matches('/').trim_end_matches(".rs");
        let column = cells.get(2).map_or("", |c| c.trim());
        let named = (!column.starts_with("everything")).then(|| {
            top_level_items(column)
                .map(|item| {
                    item.split([' ', '('])
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .filter(|m| !m.is_empty() && m != "nothing")
                .collect()
        });
        (module.to_string(), named)
    })
    .collect()
}

/// The items of a list `a, b (c, d), e`: its commas outside parentheses split it.
fn top_level_items(list: &str) -> impl Iterator<Item = &str> {
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

/// ARCHITECTURE's "May import" column says of each top-level module exactly what the graph has
/// it name (its tests included): nothing it does not import, and all it does. With the graph
/// acyclic, so is the table.
#[test]
fn the_architecture_table_says_what_each_module_imports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = load(&Disk(src), "lib.rs").edges();
    let mut named: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in edges.get(&Vec::new()).into_iter().flat_map(|e| e.keys()) {
        named.entry(from).or_default().insert(to.clone());
    }
    let mut wrong = Vec::new();
    for (module, column) in architecture_rows() {
        let Some(column) = column else {
            continue;
        };
        let code = named.get(module.as_str()).cloned().unwrap_or_default();
        for extra in column.difference(&code) {
            wrong.push(format!(
                "`{module}`'s row names {extra}, which it does not import"
            ));
        }
        for missing in code.difference(&column) {
            wrong.push(format!(
                "`{module}` imports {missing}, which its row does not name"
            ));
        }
    }
    assert!(wrong.is_empty(), "ARCHITECTURE's module table: {wrong:#?}");
}

/// The report of a made-up crate.
fn report_of(files: &[(&'static str, &'static str)]) -> BTreeMap<String, Vec<String>> {
    let files: BTreeMap<&str, &str> = files.iter().copied().collect();
    report(&load(&files, "lib.rs"))
}

#[test]
fn a_cycle_between_top_level_modules_is_found_with_its_lines() {
    let report = report_of(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "b.rs",
            "pub struct B;\n\nfn f() -> crate::c::C { todo!() }\n",
        ),
        ("c.rs", "pub struct C;\nfn g() { let _ = super::a::A; }\n"),
    ]);
    let cycle = "a -> b (a.rs:1) -> c (b.rs:3) -> a (c.rs:2)";
    assert_eq!(report["crate"], vec![cycle.to_string()]);
}

#[test]
fn a_cycle_inside_a_folder_is_found_through_children_and_uses() {
    let report = report_of(&[
        ("lib.rs", "mod q;\n"),
        ("q/mod.rs", "mod claim;\nmod end;\n"),
        // claim's child names end through `super::super`; end names claim through a `use`.
        ("q/claim.rs", "mod multi;\n"),
        ("q/claim/multi.rs", "fn f() { super::super::end::run(); }\n"),
        ("q/end.rs", "use super::claim;\nfn g() { claim::x(); }\n"),
    ]);
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(
        report["crate::q"],
        vec!["claim -> end (q/claim/multi.rs:1) -> claim (q/end.rs:1 and 1 more)".to_string()]
    );
}

#[test]
fn naming_a_parent_or_a_child_is_no_edge_but_a_re_export_is() {
    let acyclic = report_of(&[
        ("lib.rs", "mod q;\nmod task;\n"),
        (
            "q/mod.rs",
            "mod claim;\npub struct Queue;\nfn f() { claim::run(); }\n",
        ),
        ("q/claim.rs", "use super::Queue;\npub fn run() {}\n"),
        ("task.rs", "pub struct Task;\n"),
    ]);
    assert!(acyclic.is_empty(), "{acyclic:?}");
    // task names q::Queue; q re-exports task's Task: a cycle, though each names only the other's
    // folder.
    let cyclic = report_of(&[
        ("lib.rs", "mod q;\nmod task;\n"),
        (
            "q/mod.rs",
            "mod claim;\npub use crate::task::Task;\npub struct Queue;\n",
        ),
        ("q/claim.rs", "pub fn run() {}\n"),
        (
            "task.rs",
            "pub struct Task;\nfn f(_: &crate::q::Queue) {}\n",
        ),
    ]);
    assert_eq!(
        cyclic["crate"],
        vec!["q -> task (q/mod.rs:2) -> q (task.rs:2)".to_string()]
    );
}

#[test]
fn a_parent_s_re_export_does_not_hide_an_edge() {
    // end names `super::Lease`, which q only re-exports from held: end -> held. held names end
    // inside a macro.
    let report = report_of(&[
        ("lib.rs", "mod q;\n"),
        ("q/mod.rs", "mod end;\nmod held;\npub use held::Lease;\n"),
        ("q/end.rs", "pub struct Kind;\nfn f(_: super::Lease) {}\n"),
        (
            "q/held.rs",
            "pub struct Lease;\nfn g() { assert!(matches!(x, super::end::Kind)); }\n",
        ),
    ]);
    assert_eq!(
        report["crate::q"],
        vec!["end -> held (q/end.rs:2) -> end (q/held.rs:2)".to_string()]
    );
}
