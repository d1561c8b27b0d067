//! Wide levels summarised in the terminal as in the UI.

use super::*;

#[test]
fn the_terminal_tree_summarises_a_wide_level_as_the_ui_does() {
    // Every Pod shown: five under each ReplicaSet, nothing summarised.
    let all = tree_text_of_deployment("0");
    let (pods, rest) = rows_of(&all, "pods");
    assert_eq!(pods.len(), 10, "{all}");
    assert!(rest.is_empty(), "{all}");
    // The default (50) shows a level of five whole, as the UI does.
    assert_eq!(tree_text_of_deployment("50"), all);

    let text = tree_text_of_deployment("2");
    let (shown, rest) = rows_of(&text, "pods");
    assert_eq!(shown.len(), 4, "two Pods per ReplicaSet: {text}");
    assert_eq!(
        rest.len(),
        2,
        "one line per ReplicaSet for the rest: {text}"
    );
    for line in &rest {
        assert!(
            line.contains("… 3 more pods  [owner]  (not shown: 3 of 5)"),
            "{line}"
        );
        // The last line under its ReplicaSet, at the Pods' depth.
        assert!(
            line.starts_with("│  └─ … ") || line.starts_with("   └─ … "),
            "{line}"
        );
        assert!(line.contains("active p50 "), "{line}");
        assert!(line.contains("--max-siblings 0 shows all"), "{line}");
        // It names Pods that are not shown, of its own ReplicaSet.
        let first = line
            .split("; first ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        assert!(
            pods.contains(&first) && !shown.contains(&first),
            "{first}: {text}"
        );
    }
    // What is left out is left out with everything below it (a Pod's Node).
    let hidden: Vec<&&str> = pods.iter().filter(|p| !shown.contains(p)).collect();
    assert_eq!(hidden.len(), 6);
    for p in hidden {
        assert!(!text.contains(&format!("/{p}  ")), "{p} is shown: {text}");
    }
    let nodes = |t: &str| t.lines().filter(|l| l.contains("nodes kwok-node-")).count();
    assert_eq!(nodes(&text), 4, "{text}");
    assert_eq!(nodes(&all), 10, "{all}");
    // Both ReplicaSets and the Deployment are still there.
    assert_eq!(rows_of(&text, "replicasets").0.len(), 2, "{text}");
}

#[test]
fn the_terminal_cascade_summarises_a_wide_level_as_the_ui_does() {
    let write = regex::Regex::new(r"^[│├└─ ]*\+\d+\.\d{3}s  ").unwrap();
    let rest = regex::Regex::new(
        r"^[│ ]*[├└]─ … (\d+) more ([a-z ]+?)  \(not shown: (\d+) of (\d+)(?:, and the (\d+) writes they caused)?\)",
    )
    .unwrap();
    let writes = |t: &str| t.lines().filter(|l| write.is_match(l)).count();
    let all = cascade_text_of_deployment("0");
    assert!(!all.contains(" more "), "{all}");
    assert_eq!(cascade_text_of_deployment("50"), all);

    let text = cascade_text_of_deployment("2");
    let mut left_out = 0;
    let mut levels = Vec::new();
    for line in text.lines().filter(|l| l.contains("… ")) {
        let c = rest
            .captures(line)
            .unwrap_or_else(|| panic!("not a level's rest: {line}"));
        let n: usize = c[1].parse().unwrap();
        assert_eq!(c[3].parse::<usize>().unwrap(), n, "{line}");
        // Two of each level are printed, as --max-siblings says.
        assert_eq!(c[4].parse::<usize>().unwrap(), n + 2, "{line}");
        left_out += n + c.get(5).map_or(0, |b| b.as_str().parse().unwrap());
        levels.push(c[2].to_string());
        assert!(
            line.contains(" hop p50 ") && line.contains("; duration p50 "),
            "{line}"
        );
        assert!(line.contains("--max-siblings 0 shows all"), "{line}");
        // The first it names is printed in the whole text, not in this one.
        let first = line.split("; first ").nth(1).unwrap();
        let first = first.split([',', ';']).next().unwrap();
        let named = format!("{} {}/{first} ", &c[2], "default");
        assert!(all.contains(&named), "{named}: {all}");
        if c[2].starts_with("create pods") {
            assert!(!text.contains(&named), "{named}: {text}");
        }
    }
    assert!(levels.iter().any(|l| l == "create pods"), "{text}");
    // Every write is printed or counted in exactly one level's rest.
    assert!(writes(&text) < writes(&all), "{text}");
    assert_eq!(writes(&text) + left_out, writes(&all), "{text}");
}
