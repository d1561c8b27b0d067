//! Cycles among sibling modules: strongly connected components of the
//! references found, each described with where its edges are written.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use super::reader::*;

/// One reference that makes `from` depend on `to`, two modules of one parent.
#[derive(Clone, Debug)]
pub(crate) struct Edge {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
    pub(crate) written: String,
}

/// The cycles found, one per strongly connected set of siblings, each as
/// the parent module and the edges around it (with where each is written).
pub(crate) fn cycles(krate: &Crate) -> Vec<(ModPath, Vec<Edge>, Vec<Edge>)> {
    // parent → (from child → to child → first reference)
    let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Edge>>> = BTreeMap::new();
    for r in &krate.references {
        let Some(to) = krate.resolve(&r.from, &r.path, 0) else {
            continue;
        };
        let common = r.from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        let (Some(a), Some(b)) = (r.from.get(common), to.get(common)) else {
            continue; // the same module, or one inside the other
        };
        graphs
            .entry(r.from[..common].to_vec())
            .or_default()
            .entry(a.clone())
            .or_default()
            .entry(b.clone())
            .or_insert_with(|| Edge {
                from: a.clone(),
                to: b.clone(),
                file: r.file.clone(),
                line: r.line,
                written: r.path.join("::"),
            });
    }
    let mut found = Vec::new();
    for (parent, graph) in &graphs {
        for scc in strongly_connected(graph) {
            if scc.len() > 1 {
                let cycle = cycle_within(graph, &scc);
                // The other references among the same modules: each is part
                // of a cycle too, and must go for the set to come apart.
                let others = scc
                    .iter()
                    .flat_map(|v| graph.get(v).into_iter().flat_map(|m| m.values()))
                    .filter(|e| scc.contains(&e.to))
                    .filter(|e| !cycle.iter().any(|c| c.from == e.from && c.to == e.to))
                    .cloned()
                    .collect();
                found.push((parent.clone(), cycle, others));
            }
        }
    }
    found
}

/// Tarjan's algorithm over the sibling graph.
pub(crate) fn strongly_connected(
    graph: &BTreeMap<String, BTreeMap<String, Edge>>,
) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, Edge>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    pub(crate) fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flat_map(|m| m.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            s.out.push(scc);
        }
    }
    let mut s = State {
        graph,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// One cycle through the first member of `scc` (breadth-first, shortest).
pub(crate) fn cycle_within(
    graph: &BTreeMap<String, BTreeMap<String, Edge>>,
    scc: &[String],
) -> Vec<Edge> {
    let mut members: Vec<&String> = scc.iter().collect();
    members.sort();
    let start = members[0].clone();
    let mut came_from: HashMap<String, Edge> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(v) = queue.pop_front() {
        for (w, e) in graph.get(&v).into_iter().flatten() {
            if !scc.contains(w) || came_from.contains_key(w) {
                continue;
            }
            came_from.insert(w.clone(), e.clone());
            if *w == start {
                let mut path = vec![e.clone()];
                let mut at = v.clone();
                while at != start {
                    let e = &came_from[&at];
                    path.push(e.clone());
                    at = e.from.clone();
                }
                path.reverse();
                return path;
            }
            queue.push_back(w.clone());
        }
    }
    unreachable!("a strongly connected set of more than one has a cycle")
}

pub(crate) fn describe(found: &[(ModPath, Vec<Edge>, Vec<Edge>)], root: &Path) -> String {
    let mut msg = String::new();
    let line = |msg: &mut String, e: &Edge| {
        let file = e.file.strip_prefix(root).unwrap_or(&e.file);
        msg.push_str(&format!(
            "  {} -> {}  ({}:{}: {})\n",
            e.from,
            e.to,
            file.display(),
            e.line,
            e.written
        ));
    };
    for (parent, edges, others) in found {
        let parent = if parent.is_empty() {
            "crate".to_string()
        } else {
            format!("crate::{}", parent.join("::"))
        };
        msg.push_str(&format!("import cycle among the modules of {parent}:\n"));
        for e in edges {
            line(&mut msg, e);
        }
        if !others.is_empty() {
            msg.push_str(" other references among the same modules:\n");
            for e in others {
                line(&mut msg, e);
            }
        }
    }
    msg
}
