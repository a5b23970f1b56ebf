//! The layout holds, for `sandpipe` (host/src) and `sandpipe-proto` (proto/src): every file is
//! a module of its own (`run/native/landlock.rs` is `run::native::landlock`, a folder's
//! `mod.rs` is the folder, `lib.rs` is `lib`), and there is no import cycle between files, nor
//! between the folders holding them at any depth (the top-level modules, a tier's folders such
//! as `run::native` or `speak::protocols`, ...). In host/src no import points up a tier:
//! [`TIERS`] lists them bottom up, as ARCHITECTURE.md draws them.
//!
//! A file's edges are the paths it names, in `use` trees and in code: `crate::…`, `super::…`,
//! `self::…`, the names of its own child modules and the names its `use`s bind, each resolved
//! to the file that holds the item, through the `use`s of the modules on the way
//! (`crate::Exit` is `error::Exit`, through lib.rs's `pub use`). A folder's `mod.rs` holds the
//! folder, so what it names inside it is no edge (its files' `super::` paths up to it are);
//! lib.rs's code is a module like any other, its `pub use`s (the public paths) edges only
//! where that code uses them.
//! Comments, string literals, `#[cfg(test)]` inline modules and `tests.rs` files are not code
//! here; `src/bin` and `main.rs` are other crates. The two ways a plugin runs, `run::sandbox`
//! and `run::native`, import nothing of each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// File → the files it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// host/src's tiers, bottom up, as ARCHITECTURE.md draws them: a module imports from its own
/// tier and the ones below, never from one above. Each entry holds the top-level modules of
/// one tier; a top-level module missing here fails the check until it is placed. `lib` is
/// lib.rs's own code, `Host` (load, compile, start), which runs plugins through `run` and which
/// `exports` and `speak` start theirs with; its re-exports, the public paths, are no edges.
const TIERS: &[&[&str]] = &[
    &["error", "protocol", "policy", "net"],
    &["policy_file"],
    &["dist"],
    &["run"],
    &["lib"],
    &["exports"],
    &["speak"],
    &["replay"],
    &["serve"],
    &["cli"],
];

/// The name of the crate root's node.
const ROOT: &str = "lib";

/// A module path, `[]` for the crate root.
type ModPath = Vec<String>;

fn name(m: &[String]) -> String {
    if m.is_empty() {
        ROOT.to_owned()
    } else {
        m.join("::")
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file under `src` is, or `None` for a file that is not part of the library
/// (another crate's root, or test code).
fn module_of(src: &Path, file: &Path) -> Option<ModPath> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: ModPath = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts[0] == "bin" || parts == ["main"] || parts.last().is_some_and(|p| p == "tests") {
        return None;
    }
    if parts == ["lib"] || parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    Some(parts)
}

/// The code of a file without comments, string and character literals, and `#[cfg(test)]`
/// inline modules.
fn code(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= c.len() {
                    break;
                } else if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (at(i + 1) == '"' || at(i + 1) == '#')
            && !ident(at(i.wrapping_sub(1)))
        {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            while at(j) == '#' {
                j += 1;
            }
            if at(j) != '"' {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            j += 1;
            while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#')) {
                j += 1;
            }
            i = j + 1 + hashes;
            out.push_str("\"\"");
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal ('a', '\n', '\u{1F600}'); a lifetime has no closing quote.
            i += 2;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    strip_test_modules(&out)
}

/// `code` without the `#[cfg(test)] mod NAME { … }` blocks (braces balance once literals and
/// comments are gone).
fn strip_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        let is_mod = after
            .strip_prefix("mod ")
            .map(|m| m.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_' || c == ' '))
            .is_some_and(|m| m.starts_with('{'));
        if !is_mod {
            out.push_str(&rest[..at + 1]);
            rest = &rest[at + 1..];
            continue;
        }
        out.push_str(&rest[..at]);
        let open = at + rest[at..].find('{').expect("a brace");
        let mut depth = 0;
        let mut end = rest.len();
        for (k, ch) in rest[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = open + k + 1;
                break;
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    Sep,
    Open,
    Close,
    Comma,
    Glob,
}

fn tokens(s: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ':' if chars.peek() == Some(&':') => {
                chars.next();
                out.push(Token::Sep);
            }
            '{' => out.push(Token::Open),
            '}' => out.push(Token::Close),
            ',' => out.push(Token::Comma),
            '*' => out.push(Token::Glob),
            c if c.is_alphanumeric() || c == '_' => {
                let mut id = c.to_string();
                while let Some(&n) = chars.peek().filter(|n| n.is_alphanumeric() || **n == '_') {
                    id.push(n);
                    chars.next();
                }
                out.push(Token::Ident(id));
            }
            _ => {}
        }
    }
    out
}

/// One leaf of a `use` tree: the name it binds (`None` for a glob) and its path.
type UseLeaf = (Option<String>, Vec<String>);

/// The leaves of a `use` tree, `a::{b, c::D as E, f::*}`.
fn use_leaves(tree: &str) -> Vec<UseLeaf> {
    fn parse(t: &[Token], i: &mut usize, prefix: &[String], out: &mut Vec<UseLeaf>) {
        let mut path = prefix.to_vec();
        loop {
            match t.get(*i) {
                Some(Token::Ident(id)) => {
                    *i += 1;
                    if id == "as" {
                        if let Some(Token::Ident(alias)) = t.get(*i) {
                            *i += 1;
                            out.push((Some(alias.clone()), path));
                        }
                        return;
                    }
                    path.push(id.clone());
                    if t.get(*i) != Some(&Token::Sep) {
                        if t.get(*i) != Some(&Token::Ident("as".into())) {
                            let bound = if id == "self" {
                                path.pop();
                                path.last().cloned()
                            } else {
                                Some(id.clone())
                            };
                            out.push((bound, path));
                            return;
                        }
                    } else {
                        *i += 1;
                    }
                }
                Some(Token::Glob) => {
                    *i += 1;
                    out.push((None, path));
                    return;
                }
                Some(Token::Open) => {
                    *i += 1;
                    while !matches!(t.get(*i), None | Some(Token::Close)) {
                        let before = *i;
                        parse(t, i, &path, out);
                        if t.get(*i) == Some(&Token::Comma) || *i == before {
                            *i += 1;
                        }
                    }
                    *i += 1;
                    return;
                }
                _ => return,
            }
        }
    }
    let t = tokens(tree);
    let mut out = Vec::new();
    let mut i = 0;
    parse(&t, &mut i, &[], &mut out);
    out
}

/// What one file says: its `use` leaves (each marked when its `use` is `pub`, a re-export),
/// the other paths its code names, and the words of that code that may name an item.
struct File {
    uses: Vec<(UseLeaf, bool)>,
    paths: Vec<Vec<String>>,
    words: BTreeSet<String>,
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Splits a file's code into its `use` trees and the paths that start with `crate`, `super`,
/// `self`, one of `children` or a name the file's `use`s bind.
fn read_file(code: &str, children: &BTreeSet<String>) -> File {
    let mut uses = Vec::new();
    let mut rest = String::new();
    let mut tail = code;
    while let Some(at) = tail.find("use ") {
        let before = tail[..at].chars().next_back();
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            rest.push_str(&tail[..at + 4]);
            tail = &tail[at + 4..];
            continue;
        }
        let end = tail[at..].find(';').map_or(tail.len(), |e| at + e);
        let public = tail[..at].trim_end().ends_with("pub")
            || tail[..at].trim_end().ends_with(')')
                && tail[..at]
                    .rfind("pub(")
                    .is_some_and(|p| !tail[p..at].contains(';'));
        uses.extend(
            use_leaves(&tail[at + 4..end])
                .into_iter()
                .map(|l| (l, public)),
        );
        rest.push_str(&tail[..at]);
        tail = &tail[end..];
    }
    rest.push_str(tail);
    let bound: BTreeSet<&str> = uses.iter().filter_map(|((b, _), _)| b.as_deref()).collect();
    let mut paths = Vec::new();
    let c: Vec<char> = rest.chars().collect();
    let mut i = 0;
    while i < c.len() {
        if !is_ident(c[i]) || (i > 0 && (is_ident(c[i - 1]) || c[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let mut path = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < c.len() && is_ident(c[j]) {
                j += 1;
            }
            path.push(c[start..j].iter().collect::<String>());
            if c.get(j) == Some(&':')
                && c.get(j + 1) == Some(&':')
                && c.get(j + 2).is_some_and(|&n| is_ident(n))
            {
                j += 2;
            } else {
                break;
            }
        }
        let head = path[0].as_str();
        if path.len() > 1
            && (["crate", "super", "self"].contains(&head)
                || children.contains(head)
                || bound.contains(head))
        {
            paths.push(path);
        }
        i = j.max(i + 1);
    }
    // Not a method's or a field's name: those follow a `.`.
    let words = rest
        .split(|c: char| !is_ident(c) && c != '.')
        .flat_map(|w| w.split('.').next())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    File { uses, paths, words }
}

/// `path`, as written in module `at`, made absolute; `None` for another crate's path.
fn absolute(at: &[String], path: &[String], children: &BTreeSet<String>) -> Option<ModPath> {
    let mut base: ModPath = at.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some(head) if children.contains(head) => {}
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The crate's modules: each with its child modules, its `use` bindings (name → absolute
/// path; `None` for the targets of its globs) and the absolute paths its file names, less the
/// crate root's re-exports (the public paths, followed by [`Crate::resolve`] to what they
/// name).
struct Crate {
    children: BTreeMap<ModPath, BTreeSet<String>>,
    binds: BTreeMap<ModPath, Vec<(Option<String>, ModPath)>>,
    named: BTreeMap<ModPath, Vec<ModPath>>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let modules: BTreeMap<ModPath, PathBuf> = files
            .into_iter()
            .filter_map(|f| Some((module_of(src, &f)?, f)))
            .collect();
        let mut children: BTreeMap<ModPath, BTreeSet<String>> = modules
            .keys()
            .map(|m| (m.clone(), BTreeSet::new()))
            .collect();
        for m in modules.keys() {
            if let Some((last, parent)) = m.split_last()
                && let Some(c) = children.get_mut(parent)
            {
                c.insert(last.clone());
            }
        }
        let (mut binds, mut named) = (BTreeMap::new(), BTreeMap::new());
        for (m, path) in &modules {
            let kids = &children[m];
            let file = read_file(&code(&std::fs::read_to_string(path).expect("read")), kids);
            let b: Vec<(Option<String>, ModPath, bool)> = file
                .uses
                .iter()
                .filter_map(|((bound, p), public)| {
                    Some((bound.clone(), absolute(m, p, kids)?, *public))
                })
                .collect();
            let mut n: Vec<ModPath> = b
                .iter()
                .filter(|(bound, _, public)| {
                    // The root's re-exports are edges only where its own code uses them.
                    !(m.is_empty() && *public)
                        || bound.as_ref().is_some_and(|b| file.words.contains(b))
                })
                .map(|(_, p, _)| p.clone())
                .collect();
            for p in &file.paths {
                let through = b.iter().find(|(bound, _, _)| bound.as_ref() == Some(&p[0]));
                match through {
                    Some((_, target, _)) if !kids.contains(&p[0]) => {
                        n.push(target.iter().chain(&p[1..]).cloned().collect());
                    }
                    _ => n.extend(absolute(m, p, kids)),
                }
            }
            let b = b.into_iter().map(|(bound, p, _)| (bound, p)).collect();
            binds.insert(m.clone(), b);
            named.insert(m.clone(), n);
        }
        Crate {
            children,
            binds,
            named,
        }
    }

    /// The file that holds what `path` names: the longest module prefix of it, or, when the
    /// name after that prefix is one the module imports, what that import names.
    fn resolve(&self, path: &[String], hops: usize) -> ModPath {
        let mut at = 0;
        while at < path.len() && self.children.contains_key(&path[..=at]) {
            at += 1;
        }
        let module = path[..at].to_vec();
        if at < path.len() && hops < 16 {
            let through = self.binds[&module]
                .iter()
                .find(|(bound, _)| bound.as_deref() == Some(path[at].as_str()));
            if let Some((_, target)) = through {
                let mut next = target.clone();
                next.extend(path[at + 1..].iter().cloned());
                return self.resolve(&next, hops + 1);
            }
        }
        module
    }

    /// Each file's edges. A folder's `mod.rs` holds the folder: what it names inside its own
    /// folder (declaring, re-exporting and calling its files) is not an import, while its
    /// files' `super::` paths up to it are. The crate root is a module like any other here:
    /// its own code (`Host`) names what it uses.
    fn graph(&self) -> Graph {
        self.named
            .iter()
            .map(|(m, paths)| {
                let mut edges: BTreeSet<String> = paths
                    .iter()
                    .map(|p| self.resolve(p, 0))
                    .filter(|t| m.is_empty() || !(t.len() > m.len() && t.starts_with(m)))
                    .map(|t| name(&t))
                    .collect();
                edges.remove(&name(m));
                (name(m), edges)
            })
            .collect()
    }
}

fn graph(src: &Path) -> Graph {
    Crate::read(src).graph()
}

/// The strongly connected components with more than one module (Tarjan's algorithm).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in &s.g[v] {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("low");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("low");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The graph with each module folded into its folder at `depth` (`run::native::landlock` is
/// `run::native` at depth 2 and `run` at depth 1).
fn folded(g: &Graph, depth: usize) -> Graph {
    let fold = |m: &str| m.split("::").take(depth).collect::<Vec<_>>().join("::");
    let mut out = Graph::new();
    for (m, edges) in g {
        let e = out.entry(fold(m)).or_default();
        e.extend(edges.iter().map(|b| fold(b)));
        e.remove(&fold(m));
    }
    out
}

/// Every cycle, between files and between the folders at each depth, with its edges.
fn all_cycles(g: &Graph) -> Vec<String> {
    let deepest = g.keys().map(|m| m.split("::").count()).max().unwrap_or(1);
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for depth in (1..=deepest).rev() {
        let f = folded(g, depth);
        for c in cycles(&f) {
            if !seen.insert(c.clone()) {
                continue;
            }
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    f[a].iter()
                        .filter(|b| c.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            out.push(edges.join(", "));
        }
    }
    out
}

/// The tier of a module: the index in [`TIERS`] of its top-level module.
fn tier(m: &str) -> Option<usize> {
    let top = m.split("::").next().unwrap_or(m);
    TIERS.iter().position(|t| t.contains(&top))
}

/// Every edge that points up a tier, and every module no tier holds.
fn upward(g: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (a, edges) in g {
        let Some(ta) = tier(a) else {
            out.push(format!("{a} is in no tier"));
            continue;
        };
        for b in edges {
            if tier(b).is_some_and(|tb| tb > ta) {
                out.push(format!("{a} -> {b}"));
            }
        }
    }
    out
}

/// The edges between the two ways a plugin runs, `run::sandbox` (wasm) and `run::native`: what
/// both need (publishing the exit, the plugin's name) is in a module of `run` they share.
fn between_the_sandboxes(g: &Graph) -> Vec<String> {
    let under = |m: &str, folder: &str| m == folder || m.starts_with(&format!("{folder}::"));
    let mut out = Vec::new();
    for (a, edges) in g {
        for b in edges {
            if (under(a, "run::native") && under(b, "run::sandbox"))
                || (under(a, "run::sandbox") && under(b, "run::native"))
            {
                out.push(format!("{a} -> {b}"));
            }
        }
    }
    out
}

fn src(krate: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src")
}

#[test]
fn the_host_s_files_import_each_other_without_a_cycle_and_only_down_the_tiers() {
    let g = graph(&src("host"));
    // Every file is a node, with its edges, inside the tiers' folders too.
    assert!(g["run::session"].contains("run::native"), "{g:?}");
    assert!(g["speak::driver"].contains("run::session"), "{g:?}");
    assert!(g.contains_key("run::native::landlock"), "{g:?}");
    assert!(g.contains_key("exports::oracle"), "{g:?}");
    assert!(g.contains_key("cli::run"), "{g:?}");
    assert!(g[ROOT].contains("run::hash_index"), "{:?}", g[ROOT]);
    let (cycles, up, across) = (all_cycles(&g), upward(&g), between_the_sandboxes(&g));
    assert!(
        cycles.is_empty() && up.is_empty() && across.is_empty(),
        "host: import cycles: {}\nhost: imports up a tier: {}\nhost: between the sandboxes: {}",
        cycles.join("; "),
        up.join("; "),
        across.join("; ")
    );
}

#[test]
fn the_protocol_crate_s_files_import_each_other_without_a_cycle() {
    let g = graph(&src("proto"));
    assert!(g.len() > 20, "proto: found only {:?}", g.keys());
    let cycles = all_cycles(&g);
    assert!(
        cycles.is_empty(),
        "proto: import cycles: {}",
        cycles.join("; ")
    );
}

#[test]
fn the_check_sees_a_cycle() {
    let g: Graph = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
    assert_eq!(
        use_leaves("crate::{jsonrpc::{A, B as C}, stopped::{self, Stopped}, x::*}"),
        [
            (Some("A".into()), vec!["crate", "jsonrpc", "A"]),
            (Some("C".into()), vec!["crate", "jsonrpc", "B"]),
            (Some("stopped".into()), vec!["crate", "stopped"]),
            (Some("Stopped".into()), vec!["crate", "stopped", "Stopped"]),
            (None, vec!["crate", "x"]),
        ]
        .map(|(b, p)| (b, p.into_iter().map(str::to_owned).collect::<Vec<_>>()))
    );
    assert_eq!(
        code("let s = \"crate::a\"; // crate::b\nlet c = '{'; r#\"super::c\"#; crate::d::E"),
        "let s = \"\"; \nlet c = ' '; \"\"; crate::d::E"
    );
}

/// A synthetic tree: two files of `run/native/` naming each other (one through `super::`, one
/// through `crate::` and a re-export of lib.rs), and `policy_file.rs` naming a module of
/// `speak`, a higher tier. Both are reported, with their files.
#[test]
fn the_check_sees_a_cycle_inside_a_tier_s_folder_and_an_import_up_a_tier() {
    let dir = std::env::temp_dir().join(format!("sandpipe-layout-{}", std::process::id()));
    let files = [
        (
            "lib.rs",
            "mod run;\nmod speak;\npub mod policy_file;\npub use run::native::a::Alpha;\n",
        ),
        ("policy_file.rs", "use crate::speak::protocols::Protocol;\n"),
        ("speak/mod.rs", "pub mod protocols;\n"),
        ("speak/protocols/mod.rs", "pub enum Protocol {}\n"),
        ("run/mod.rs", "pub(crate) mod native;\n"),
        ("run/native/mod.rs", "mod a;\nmod b;\n"),
        (
            "run/native/a.rs",
            "// crate::run::native::mod::nothing\npub struct Alpha(super::b::Beta);\n",
        ),
        (
            "run/native/b.rs",
            "pub struct Beta;\n/// [`crate::speak`]\nfn f() { let _ = crate::Alpha; }\n\
             #[cfg(test)]\nmod tests { use crate::cli::X; }\n",
        ),
    ];
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let g = graph(&dir);
    std::fs::remove_dir_all(&dir).expect("rm");
    assert_eq!(
        g["run::native::b"],
        BTreeSet::from(["run::native::a".to_owned()]),
        "{g:?}"
    );
    assert_eq!(
        all_cycles(&g),
        ["run::native::a -> run::native::b, run::native::b -> run::native::a"]
    );
    assert_eq!(upward(&g), ["policy_file -> speak::protocols"]);
    // Without the circle and the upward import, nothing is reported.
    let mut fixed = g.clone();
    fixed.get_mut("run::native::b").expect("b").clear();
    fixed.get_mut("policy_file").expect("policy_file").clear();
    assert!(all_cycles(&fixed).is_empty() && upward(&fixed).is_empty());
}
