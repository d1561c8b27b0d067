//! Flags choosing the relation rules, and `kascade rules`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::app::RuleSources;

/// Where the relation rules come from (flattened into every subcommand that
/// uses them).
#[derive(Args, Debug, Clone)]
pub struct RulesArgs {
    /// Directory of relation rule files (*.yaml) added to the rules built into the binary; a rule, propagation or timer with a built-in's name replaces it (`kascade rules list` shows the effective rules).
    #[arg(long, env = "KASCADE_RULES")]
    pub rules: Option<PathBuf>,
    /// Leave the built-in rules out: only --rules DIR's rules apply.
    #[arg(long, requires = "rules")]
    pub no_builtin_rules: bool,
}

impl From<RulesArgs> for RuleSources {
    fn from(a: RulesArgs) -> Self {
        RuleSources {
            dir: a.rules,
            builtin: !a.no_builtin_rules,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum RulesCommand {
    /// Validate every rule file in DIR, as used over the built-in rules; exits non-zero naming each bad rule.
    Check {
        /// Directory of *.yaml rule files.
        dir: PathBuf,
        /// Check DIR alone, as `--no-builtin-rules` uses it.
        #[arg(long)]
        no_builtin_rules: bool,
    },
    /// Print the effective rules, propagations and timers, each with the file it comes from.
    List {
        #[command(flatten)]
        rules: RulesArgs,
    },
}
