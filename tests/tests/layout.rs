//! The layout holds: no import cycle between the top-level modules of `sandpipe` (host/src) or
//! `sandpipe-proto` (proto/src), nor between the modules inside one of host/src's tier folders
//! (`run`, `speak`, `dist`), nor between the tiers themselves. A module's `crate::NAME` paths
//! (`crate::TIER::NAME` for a tier's module, and `super::NAME` in a file whose parent is the
//! crate root or a tier) are its edges; comments and `#[cfg(test)] mod tests` are not. A cycle
//! means two modules cannot be read, or moved, one without the other: the tiers
//! ARCHITECTURE.md names depend downwards only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the top-level modules it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// host/src's tier folders: their modules are nodes of their own, `TIER::NAME`.
const TIERS: [&str; 3] = ["run", "speak", "dist"];

/// `NAME`, or `TIER::NAME` when `rest` (what follows `crate::`) starts with a tier.
fn node(rest: &str) -> Option<String> {
    let head = ident(rest)?;
    if TIERS.contains(&head.as_str()) {
        let inner = rest[head.len()..].strip_prefix("::")?;
        return Some(format!("{head}::{}", ident(inner)?));
    }
    Some(head)
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

/// The code of a file without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment of each item of a `crate::{...}` group starting at `rest`.
fn group_heads(rest: &str) -> Vec<String> {
    let (mut depth, mut item, mut items) = (1, String::new(), Vec::new());
    for c in rest.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            break;
        }
        if depth == 1 && c == ',' {
            items.push(std::mem::take(&mut item));
        } else {
            item.push(c);
        }
    }
    items.push(item);
    items.iter().filter_map(|i| ident(i.trim_start())).collect()
}

fn ident(s: &str) -> Option<String> {
    let end = s
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| s[..end].to_owned())
}

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::new();
    for path in files {
        let rel = path
            .strip_prefix(src)
            .expect("under src")
            .with_extension("");
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if ["lib", "main", "bin"].contains(&parts[0].as_str())
            || parts.last().is_some_and(|p| p == "tests")
        {
            continue;
        }
        let tier = TIERS.contains(&parts[0].as_str()) && parts.len() > 1 && parts[1] != "mod";
        let top = if tier {
            format!("{}::{}", parts[0], parts[1])
        } else {
            parts[0].clone()
        };
        let code = code(&std::fs::read_to_string(&path).expect("read"));
        let edges = g.entry(top.clone()).or_default();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            match rest.strip_prefix('{') {
                Some(group) => edges.extend(group_heads(group)),
                None => edges.extend(node(rest)),
            }
        }
        // In a module's own file, `super::` is its parent: the crate root for a top-level
        // module, the tier for a tier's module.
        let own_file = |depth: usize| {
            parts.len() == depth || (parts.len() == depth + 1 && parts[depth] == "mod")
        };
        let parent = if tier && own_file(2) {
            Some(format!("{}::", parts[0]))
        } else if !tier && own_file(1) {
            Some(String::new())
        } else {
            None
        };
        if let Some(parent) = parent {
            for (at, _) in code.match_indices("super::") {
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c == ':' || c.is_alphanumeric() || c == '_') {
                    continue;
                }
                edges.extend(ident(&code[at + "super::".len()..]).map(|m| format!("{parent}{m}")));
            }
        }
        edges.remove(&top);
    }
    let modules: BTreeSet<String> = g.keys().cloned().collect();
    for edges in g.values_mut() {
        edges.retain(|e| modules.contains(e));
    }
    g
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

fn no_cycles_in(krate: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    let g = graph(&src);
    assert!(g.len() > 5, "{krate}: found only {:?}", g.keys());
    check(krate, &g);
    // The tiers, each folded into one node.
    let tier_of = |m: &str| m.split("::").next().unwrap_or(m).to_owned();
    let mut tiers = Graph::new();
    for (m, edges) in &g {
        let t = tiers.entry(tier_of(m)).or_default();
        t.extend(edges.iter().map(|e| tier_of(e)));
        t.remove(&tier_of(m));
    }
    check(&format!("{krate} (tiers)"), &tiers);
}

fn check(krate: &str, g: &Graph) {
    let found = cycles(g);
    let explain: Vec<String> = found
        .iter()
        .map(|c| {
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    g[a].iter()
                        .filter(|b| c.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            edges.join(", ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "{krate}: import cycles: {}",
        explain.join("; ")
    );
}

#[test]
fn the_host_s_modules_import_each_other_without_a_cycle() {
    no_cycles_in("host");
    // The tiers' modules are nodes of their own, with their edges.
    let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/src"));
    assert!(g["run::session"].contains("run::native"), "{g:?}");
    assert!(g["speak::driver"].contains("run::session"), "{g:?}");
}

#[test]
fn the_protocol_crate_s_modules_import_each_other_without_a_cycle() {
    no_cycles_in("proto");
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
        group_heads("jsonrpc::{A, B}, stopped::Stopped}; rest"),
        ["jsonrpc", "stopped"]
    );
}
