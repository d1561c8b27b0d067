//! Trees drawn in the terminal (`kascade trace`'s objects and cascades):
//! the lines in order, a wide level's rest said last under its parent, and
//! each line's prefix (`├─ `, `└─ `, `│  `).

/// One line of a tree: a node (its index), or the line standing for the
/// rest of a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Row<'a> {
    Node(usize),
    Rest(&'a str),
}

/// The tree's lines in order with their depths: `walk` (node, depth),
/// depth first, without the nodes `hidden` leaves out, and each rest
/// `(parent, line)` said last under its parent, in the order given.
pub(crate) fn rows<'a>(
    walk: &[(usize, usize)],
    hidden: impl Fn(usize) -> bool,
    rests: &'a [(usize, String)],
) -> Vec<(Row<'a>, usize)> {
    let mut rows = Vec::with_capacity(walk.len());
    // (depth of the parent, the rest's line), in the order they close.
    let mut open: Vec<(usize, &'a str)> = Vec::new();
    let close = |open: &mut Vec<(usize, &'a str)>, rows: &mut Vec<(Row<'a>, usize)>, depth| {
        while open.last().is_some_and(|(d, _)| *d >= depth) {
            let (d, line) = open.pop().expect("checked above");
            rows.push((Row::Rest(line), d + 1));
        }
    };
    for &(i, depth) in walk {
        if hidden(i) {
            continue;
        }
        close(&mut open, &mut rows, depth);
        rows.push((Row::Node(i), depth));
        for (_, line) in rests.iter().filter(|(parent, _)| *parent == i).rev() {
            open.push((depth, line.as_str()));
        }
    }
    close(&mut open, &mut rows, 0);
    rows
}

/// The prefixes of a tree's lines, taken row by row in order.
#[derive(Debug, Default)]
pub(crate) struct Prefixes {
    /// Per depth: whether the row last seen at it is the last of its level.
    last_at_depth: Vec<bool>,
}

impl Prefixes {
    /// The prefix of `rows[pos]`: "│  " for each ancestor with siblings
    /// still to come, then the row's own branch. Called for every row, in
    /// order.
    pub(crate) fn of<R>(&mut self, rows: &[(R, usize)], pos: usize) -> String {
        let depth = rows[pos].1;
        let is_last = !rows[pos + 1..]
            .iter()
            .take_while(|(_, d)| *d >= depth)
            .any(|(_, d)| *d == depth);
        self.last_at_depth.truncate(depth);
        let mut prefix = self.ancestors();
        if depth > 0 {
            prefix.push_str(if is_last { "└─ " } else { "├─ " });
        }
        self.last_at_depth.push(is_last);
        prefix
    }

    /// The prefix of lines under the row last taken (its details): the
    /// tree's lines go on through them, its own too when it has children.
    pub(crate) fn under(&self, has_children: bool) -> String {
        let mut prefix = self.ancestors();
        prefix.push_str(if has_children { "│  " } else { "   " });
        prefix
    }

    fn ancestors(&self) -> String {
        let mut prefix = String::new();
        for &last in self.last_at_depth.iter().skip(1) {
            prefix.push_str(if last { "   " } else { "│  " });
        }
        prefix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree drawn from its walk: each row's prefix and label.
    fn drawn(walk: &[(usize, usize)], hidden: &[usize], rests: &[(usize, String)]) -> String {
        let rows = rows(walk, |i| hidden.contains(&i), rests);
        let mut prefixes = Prefixes::default();
        let mut out = String::new();
        for pos in 0..rows.len() {
            out.push_str(&prefixes.of(&rows, pos));
            match rows[pos].0 {
                Row::Node(i) => out.push_str(&format!("n{i}\n")),
                Row::Rest(line) => out.push_str(&format!("{line}\n")),
            }
        }
        out
    }

    #[test]
    fn a_hidden_node_leaves_its_subtree_out_and_the_rest_closes_its_level() {
        // 0 ─ 1 ─ 2
        //   └ 3 ─ 4
        //   └ 5
        let walk = [(0, 0), (1, 1), (2, 2), (3, 1), (4, 2), (5, 1)];
        assert_eq!(
            drawn(&walk, &[], &[]),
            "n0\n├─ n1\n│  └─ n2\n├─ n3\n│  └─ n4\n└─ n5\n"
        );
        // 3 hidden with its child; its level's rest said last under 0.
        assert_eq!(
            drawn(&walk, &[3, 4], &[(0, "… 1 more".to_string())]),
            "n0\n├─ n1\n│  └─ n2\n├─ n5\n└─ … 1 more\n"
        );
        // A rest under a node deeper down comes before the next sibling of
        // that node, not at the end.
        assert_eq!(
            drawn(&walk, &[], &[(1, "… rest of 1".to_string())]),
            "n0\n├─ n1\n│  ├─ n2\n│  └─ … rest of 1\n├─ n3\n│  └─ n4\n└─ n5\n"
        );
    }

    #[test]
    fn details_under_a_row_continue_the_lines_still_open() {
        let walk = [(0, 0), (1, 1), (2, 2), (3, 1)];
        let rows = rows(&walk, |_| false, &[]);
        let mut prefixes = Prefixes::default();
        let under: Vec<String> = (0..rows.len())
            .map(|pos| {
                prefixes.of(&rows, pos);
                let has_children = rows.get(pos + 1).is_some_and(|(_, d)| *d > rows[pos].1);
                prefixes.under(has_children)
            })
            .collect();
        assert_eq!(under, ["│  ", "│  │  ", "│        ", "      "]);
    }
}
