//! Where the relation rules come from (the built-in `rules/` and a user's
//! directory layered over them) and `kascade rules check|list`.

use anyhow::Context as _;
use std::path::{Path, PathBuf};

use crate::aggregate::rules::{Part, RuleError, RuleSet, read_dir};

/// The rules shipped in `rules/`, built into the binary.
pub const BUILTIN_RULES: &[(&str, &str)] = &[
    ("rules/links.yaml", include_str!("../../rules/links.yaml")),
    (
        "rules/networking.yaml",
        include_str!("../../rules/networking.yaml"),
    ),
    ("rules/pods.yaml", include_str!("../../rules/pods.yaml")),
    (
        "rules/propagation.yaml",
        include_str!("../../rules/propagation.yaml"),
    ),
    ("rules/policy.yaml", include_str!("../../rules/policy.yaml")),
    (
        "rules/storage.yaml",
        include_str!("../../rules/storage.yaml"),
    ),
    ("rules/timers.yaml", include_str!("../../rules/timers.yaml")),
];

/// Which rule files make the effective rules: the built-in ones (unless
/// left out) and then a user's directory, whose rules, propagations and
/// timers add to the built-in ones and replace those of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSources {
    /// A directory of `*.yaml`/`*.yml` rule files layered over the built-in rules.
    pub dir: Option<PathBuf>,
    /// Whether the built-in rules are the first layer.
    pub builtin: bool,
}

impl Default for RuleSources {
    fn default() -> Self {
        RuleSources {
            dir: None,
            builtin: true,
        }
    }
}

impl RuleSources {
    /// The built-in rules with `dir`'s over them.
    pub fn with_dir(dir: impl Into<PathBuf>) -> Self {
        RuleSources {
            dir: Some(dir.into()),
            builtin: true,
        }
    }

    /// Only `dir`'s rules, none built in.
    pub fn only_dir(dir: impl Into<PathBuf>) -> Self {
        RuleSources {
            dir: Some(dir.into()),
            builtin: false,
        }
    }

    /// The effective rules; every problem named by file, item and field.
    pub fn load(&self) -> anyhow::Result<RuleSet> {
        let mut layers = Vec::new();
        if self.builtin {
            layers.push(
                BUILTIN_RULES
                    .iter()
                    .map(|(name, text)| (name.to_string(), text.to_string()))
                    .collect(),
            );
        }
        if let Some(dir) = &self.dir {
            layers.push(read_dir(dir).map_err(invalid)?);
        }
        let set = RuleSet::from_layers(&layers).map_err(invalid)?;
        for o in set.overrides() {
            tracing::info!(
                part = %o.part,
                name = %o.name,
                source = %o.source,
                replaced = %o.replaced,
                "a rule file replaces a built-in {} of the same name",
                o.part
            );
        }
        Ok(set)
    }
}

fn invalid(errors: Vec<RuleError>) -> anyhow::Error {
    let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    anyhow::anyhow!("invalid rules:\n  {}", lines.join("\n  "))
}

/// `kascade rules check DIR`: DIR's files checked as they would be used
/// (over the built-in rules unless `builtin` is false).
pub fn run_rules_check(dir: &Path, builtin: bool) -> anyhow::Result<()> {
    let own = RuleSet::from_layers(&[read_dir(dir).map_err(invalid)?]).map_err(invalid)?;
    let sources = RuleSources {
        dir: Some(dir.to_path_buf()),
        builtin,
    };
    let effective = sources.load()?;
    let mut out = String::new();
    out.push_str(&format!(
        "{}: {} rules, {} propagations, {} timers OK",
        dir.display(),
        own.len(),
        own.propagations().len(),
        own.timers().len()
    ));
    if builtin {
        let replaced: Vec<String> = effective
            .overrides()
            .iter()
            .map(|o| format!("{} {:?} ({})", o.part, o.name, o.replaced))
            .collect();
        if !replaced.is_empty() {
            out.push_str(&format!("\n  replacing built-in: {}", replaced.join(", ")));
        }
        out.push_str(&format!(
            "\n  with the built-in rules: {} rules, {} propagations, {} timers",
            effective.len(),
            effective.propagations().len(),
            effective.timers().len()
        ));
    }
    crate::terminal::print(&format!("{out}\n")).context("writing the rules check")?;
    Ok(())
}

/// `kascade rules list`: every effective rule, propagation and timer, with
/// the file it comes from.
pub fn run_rules_list(sources: &RuleSources) -> anyhow::Result<()> {
    let set = sources.load()?;
    let overridden = |part: Part, name: &str| {
        set.overrides()
            .iter()
            .find(|o| o.part == part && o.name == name)
            .map(|o| format!("  (replaces {})", o.replaced))
            .unwrap_or_default()
    };
    let mut rules: Vec<_> = set.rules().collect();
    rules.sort_by(|a, b| (&a.source, &a.name).cmp(&(&b.source, &b.name)));
    let mut out = String::new();
    out.push_str(&format!("RULES ({})\n", rules.len()));
    for r in rules {
        out.push_str(&format!(
            "  {:<32} {:<24} {}{}\n",
            r.name,
            r.source,
            r.summary(),
            overridden(Part::Rule, &r.name)
        ));
    }
    out.push_str(&format!("PROPAGATIONS ({})\n", set.propagations().len()));
    for p in set.propagations() {
        out.push_str(&format!(
            "  {:<32} {:<24} {}{}\n",
            p.name,
            p.source,
            p.summary(),
            overridden(Part::Propagation, &p.name)
        ));
    }
    out.push_str(&format!("TIMERS ({})\n", set.timers().len()));
    for t in set.timers() {
        out.push_str(&format!(
            "  {:<32} {:<24} {}{}\n",
            t.name,
            t.source,
            t.summary(),
            overridden(Part::Timer, &t.name)
        ));
    }
    crate::terminal::print(&format!("{}\n", out.trim_end())).context("writing the rules list")?;
    Ok(())
}
