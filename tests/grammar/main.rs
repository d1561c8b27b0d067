//! One grammar across the subcommands, as a user types it: objects named
//! the same way everywhere (`-n`, `--object RES/NAME`, kubectl's resource
//! names), help texts true for their subcommand, refused combinations and
//! bad inputs said plainly, `trace --format json`, and `replay` without a
//! receiver. Every case runs the binary on the captured fixtures.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeSet;

use std::process::{Command, Output};

use serde_json::Value;

fn kascade() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kascade"));
    cmd.env("NO_COLOR", "1");
    cmd
}

fn run(args: &[&str]) -> Output {
    kascade().args(args).output().unwrap()
}

fn stdout_of(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "kascade {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The error of a run that must fail (exit 1), from stderr.
fn error_of(args: &[&str]) -> String {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "kascade {args:?}: {stderr}");
    stderr
}

fn fixture(scenario: &str) -> String {
    common::fixture_path(scenario, "audit.log")
        .display()
        .to_string()
}

/// `analyze --format json`'s count of an edge class.
fn edge_count(report: &Value, edge: &str) -> u64 {
    report["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["edge"] == edge)
        .map_or(0, |e| e["count"].as_u64().unwrap())
}

/// The writes of `resource`/`name` in a fixture as (verb, subresource, user, code, auditID),
/// read from the audit log itself.
fn audit_writes(
    scenario: &str,
    resource: &str,
    name: &str,
) -> BTreeSet<(String, String, String, i64, String)> {
    common::audit_lines(scenario)
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && ["create", "update", "patch", "delete"].contains(&e["verb"].as_str().unwrap())
                && e["objectRef"]["resource"] == resource
                && (e["objectRef"]["name"] == name
                    || e["responseObject"]["metadata"]["name"] == name)
        })
        .map(|e| {
            (
                e["verb"].as_str().unwrap().to_string(),
                e["objectRef"]["subresource"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                e["user"]["username"].as_str().unwrap().to_string(),
                e["responseStatus"]["code"].as_i64().unwrap(),
                e["auditID"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn json_writes(object: &Value) -> BTreeSet<(String, String, String, i64, String)> {
    object["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["verb"].as_str().unwrap().to_string(),
                w["subresource"].as_str().unwrap_or("").to_string(),
                w["user"].as_str().unwrap().to_string(),
                w["code"].as_i64().unwrap(),
                w["audit_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

mod bad_input;
mod help;
mod objects;
mod replay;
mod trace_json;
