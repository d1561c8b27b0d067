//! The `kascade` binary's manners as a user meets them in a shell: a
//! reader that stops early (`| head`), colour only where it is asked for,
//! `--quiet`, text wrapped to `COLUMNS`, advice meant for the collector's
//! operator kept out of offline runs, shell completions and man pages.

mod common;

use std::process::{Command, Output, Stdio};

fn kascade() -> Command {
    without_the_tests_settings(Command::new(env!("CARGO_BIN_EXE_kascade")))
}

/// The tests' own environment must not decide what they check.
fn without_the_tests_settings(mut cmd: Command) -> Command {
    for var in [
        "NO_COLOR",
        "KASCADE_COLOR",
        "COLUMNS",
        "RUST_LOG",
        "KASCADE_LOG_FORMAT",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `cmd`, which must succeed.
fn succeeded(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", text(&out.stderr));
    out
}

fn deployment_log() -> String {
    common::fixture_path("deployment", "audit.log")
        .display()
        .to_string()
}

/// The rollout-stuck fixture: explain's findings there run to hundreds of
/// characters a line.
fn rollout_log() -> String {
    common::fixture_path("rollout-stuck", "audit.log")
        .display()
        .to_string()
}

/// Every subcommand that prints on stdout, on the fixtures.
fn stdout_writers() -> Vec<Vec<String>> {
    let log = deployment_log();
    let hello = ["--resource", "deployments", "--name", "hello"];
    let hello = hello.map(String::from);
    let trace = |extra: &[&str]| {
        let mut argv = vec!["trace".to_string(), log.clone()];
        argv.extend(hello.iter().cloned());
        argv.extend(["--namespace".to_string(), "default".to_string()]);
        argv.extend(extra.iter().map(|s| s.to_string()));
        argv
    };
    let argv = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        trace(&[]),
        trace(&["--mode", "cascade"]),
        trace(&["--format", "otlp-json"]),
        argv(&["explain", &log]),
        argv(&["explain", &log, "--format", "json"]),
        argv(&["analyze", &log]),
        argv(&[
            "rules",
            "check",
            concat!(env!("CARGO_MANIFEST_DIR"), "/rules"),
        ]),
        argv(&["--help"]),
        argv(&["--version"]),
        argv(&["completions", "bash"]),
        argv(&["man"]),
    ]
}

#[test]
fn every_command_ends_quietly_when_its_reader_has_gone() {
    for argv in stdout_writers() {
        // The reader is gone before kascade writes: every write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = kascade()
            .args(&argv)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "kascade {}: {stderr}",
            argv.join(" ")
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "kascade {}: {stderr}",
            argv.join(" ")
        );
    }
}

#[test]
fn a_reader_that_stops_early_gets_the_beginning() {
    // `| head -1`, for real: the first line arrives, the rest is not an error.
    let mut child = kascade()
        .args(["explain", &rollout_log()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(first.starts_with("kascade explain"), "{first:?}");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

const ESC: &str = "\u{1b}[";

#[test]
fn colour_only_where_asked_for() {
    let log = rollout_log();
    // Debug logs, so that stderr has lines to colour.
    let run = |flags: &[&str], env: &[(&str, &str)]| {
        let out = succeeded(
            kascade()
                .args(flags)
                .args(["explain", &log])
                .env("RUST_LOG", "kascade=debug")
                .envs(env.iter().copied()),
        );
        (text(&out.stdout), text(&out.stderr))
    };
    // Piped, `auto` colours nothing.
    let (stdout, stderr) = run(&[], &[]);
    assert!(stderr.contains("DEBUG"), "{stderr}");
    assert!(!stderr.contains(ESC), "{stderr}");
    assert!(!stdout.contains(ESC), "{stdout}");
    // `always` colours both the logs and the report, NO_COLOR or not.
    for (flags, env) in [
        (&["--color", "always"][..], &[("NO_COLOR", "1")][..]),
        (&[], &[("KASCADE_COLOR", "always")]),
    ] {
        let (stdout, stderr) = run(flags, env);
        assert!(stderr.contains(ESC), "{flags:?} {env:?}: {stderr}");
        assert!(stdout.contains(ESC), "{flags:?} {env:?}: {stdout}");
    }
    let (stdout, stderr) = run(&["--color", "never"], &[]);
    assert!(!stderr.contains(ESC) && !stdout.contains(ESC));

    // clap's own help and errors follow the same choice.
    let help = |flags: &[&str], env: &[(&str, &str)]| {
        text(
            &succeeded(
                kascade()
                    .args(flags)
                    .args(["explain", "--help"])
                    .envs(env.iter().copied()),
            )
            .stdout,
        )
    };
    assert!(!help(&[], &[]).contains(ESC));
    assert!(help(&["--color", "always"], &[]).contains(ESC));
    assert!(help(&["--color=always"], &[]).contains(ESC));
    assert!(help(&[], &[("KASCADE_COLOR", "always")]).contains(ESC));
    assert!(!help(&["--color", "never"], &[("KASCADE_COLOR", "always")]).contains(ESC));
    let refused = kascade()
        .args(["--color", "always", "explain", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains(ESC),
        "{}",
        text(&refused.stderr)
    );
    assert!(
        text(&refused.stderr).contains("--no-such-flag"),
        "{}",
        text(&refused.stderr)
    );
}

#[test]
fn offline_commands_leave_the_audit_policy_advice_to_the_collector() {
    const ADVICE: &str = "omitManagedFields";
    let log = deployment_log();
    let dir = tempfile::tempdir().unwrap();
    let spans = format!("otlp-json={}", dir.path().join("spans.jsonl").display());
    let hello = ["--resource", "deployments", "--name", "hello"];
    for argv in [
        vec![
            "trace",
            &log,
            hello[0],
            hello[1],
            hello[2],
            hello[3],
            "--namespace",
            "default",
        ],
        vec!["explain", &log],
        vec!["analyze", &log],
        vec!["replay", &log, "--output", &spans],
    ] {
        let stderr = text(&succeeded(kascade().args(&argv)).stderr);
        assert!(!stderr.contains(ADVICE), "{argv:?}: {stderr}");
        // The fixture's events do carry managedFields: the advice is
        // there for who asks for debug logs.
        let debug = text(&succeeded(kascade().args(&argv).env("RUST_LOG", "debug")).stderr);
        let advice = debug.lines().find(|l| l.contains(ADVICE));
        assert!(
            advice.is_some_and(|l| l.contains("DEBUG")),
            "{argv:?}: {debug}"
        );
    }
}

#[test]
fn quiet_leaves_only_warnings_and_errors_on_stderr() {
    let log = deployment_log();
    let dir = tempfile::tempdir().unwrap();
    let spans = format!("otlp-json={}", dir.path().join("spans.jsonl").display());
    // replay's summary, analyze's plots, debug logs asked for by RUST_LOG:
    // what each says without --quiet, and nothing with it.
    let plots = dir.path().join("plots");
    let plots = plots.display().to_string();
    let cases: [(&[&str], &str); 3] = [
        (&["replay", &log, "--output", &spans], "replayed"),
        (&["analyze", &log, "--plot", &plots], "wrote"),
        (&["explain", &log], "DEBUG"),
    ];
    for (argv, said) in cases {
        let loud = succeeded(kascade().args(argv).env("RUST_LOG", "debug"));
        assert!(text(&loud.stderr).contains(said), "{argv:?}");
        for quiet in ["-q", "--quiet"] {
            let out = succeeded(kascade().arg(quiet).args(argv).env("RUST_LOG", "debug"));
            assert_eq!(text(&out.stderr), "", "{quiet} {argv:?}");
            assert_eq!(out.stdout.is_empty(), loud.stdout.is_empty(), "{argv:?}");
        }
    }
    // Logs read oldest first are said to be; not under --quiet.
    let older = common::fixture_path("deployment", "audit.log");
    let newer = common::fixture_path("rollout-stuck", "audit.log");
    let reordered = |quiet: &[&str]| {
        let out = kascade()
            .args(quiet)
            .arg("explain")
            .args([&newer, &older])
            .output()
            .unwrap();
        text(&out.stderr)
    };
    assert!(reordered(&[]).contains("oldest first"));
    assert!(!reordered(&["-q"]).contains("oldest first"));
    // A malformed line is still said.
    let mixed = dir.path().join("mixed.log");
    let mut lines = std::fs::read_to_string(&older).unwrap();
    lines.push_str("not an audit event\n");
    std::fs::write(&mixed, lines).unwrap();
    let out = kascade()
        .args(["-q", "explain"])
        .arg(&mixed)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("mixed.log:") && stderr.contains("(skipped)"),
        "{stderr}"
    );
}

fn width(line: &str) -> usize {
    line.chars().count()
}

#[test]
fn text_is_wrapped_to_columns_and_left_whole_when_piped() {
    let log = rollout_log();
    let explain = |columns: Option<&str>| {
        let mut cmd = kascade();
        cmd.args(["explain", &log]);
        if let Some(c) = columns {
            cmd.env("COLUMNS", c);
        }
        text(&succeeded(&mut cmd).stdout)
    };
    // Piped without COLUMNS: one line per item, however long.
    let whole = explain(None);
    let longest = whole.lines().map(width).max().unwrap();
    assert!(
        longest > 200,
        "the fixture's report has no long line: {whole}"
    );
    let wrapped = explain(Some("80"));
    for line in wrapped.lines() {
        assert!(width(line) <= 80, "{line:?}");
    }
    // The same text, and a continuation indented under its line.
    assert_eq!(printed(&wrapped), printed(&whole));
    let error = wrapped
        .lines()
        .position(|l| l.starts_with("ERROR"))
        .unwrap();
    let next = wrapped.lines().nth(error + 1).unwrap();
    assert!(
        next.starts_with("     ") && !next.trim().is_empty(),
        "{next:?}"
    );

    // trace's trees keep their lines: a continuation of a line that has
    // children below carries the tree's `│` down to them.
    let tree = |columns: &str| {
        text(
            &succeeded(
                kascade()
                    .args(["trace", &log, "--resource", "deployments", "--name", "web"])
                    .args(["--namespace", "rollout-demo", "--mode", "cascade"])
                    .env("COLUMNS", columns),
            )
            .stdout,
        )
    };
    let narrow = tree("72");
    for line in narrow.lines() {
        assert!(width(line) <= 72, "{line:?}");
    }
    let lines: Vec<&str> = narrow.lines().collect();
    let root = lines.iter().position(|l| l.starts_with("+0.000s")).unwrap();
    assert!(lines[root + 1].starts_with("│    "), "{narrow}");
    assert_eq!(printed(&narrow), printed(&tree("10000")));
}

#[test]
fn analyze_fits_its_table_and_bars_to_columns() {
    let log = deployment_log();
    let analyze = |columns: Option<&str>| {
        let mut cmd = kascade();
        cmd.args(["analyze", &log]);
        if let Some(c) = columns {
            cmd.env("COLUMNS", c);
        }
        text(&succeeded(&mut cmd).stdout)
    };
    let bar = |text: &str| {
        text.lines()
            .map(|l| l.chars().filter(|c| *c == '█').count())
            .max()
            .unwrap()
    };
    // Piped: one row per edge (its name and figures), bars 40 wide.
    let whole = analyze(None);
    let row = whole
        .lines()
        .find(|l| l.starts_with("replicasets → pods create "))
        .unwrap_or_else(|| panic!("no row of the edge: {whole}"));
    assert!(row.ends_with('s'), "{row:?}");
    assert_eq!(bar(&whole), 40, "{whole}");
    assert!(whole.lines().map(width).max().unwrap() > 60, "{whole}");

    // 60 columns: the same figures, the name above them, shorter bars.
    let narrow = analyze(Some("60"));
    for line in narrow.lines() {
        assert!(width(line) <= 60, "{line:?}");
    }
    let lines: Vec<&str> = narrow.lines().collect();
    let name = lines
        .iter()
        .position(|l| *l == "replicasets → pods create")
        .unwrap_or_else(|| panic!("no line naming the edge: {narrow}"));
    let figures: Vec<&str> = lines[name + 1].split_whitespace().collect();
    let whole_figures: Vec<&str> = row.split_whitespace().skip(4).collect();
    assert_eq!(figures, whole_figures);
    assert_eq!(printed(&narrow), printed(&whole));

    // 44 columns: shorter bars, nothing else changed but the layout.
    let narrower = analyze(Some("44"));
    for line in narrower.lines() {
        assert!(width(line) <= 44, "{line:?}");
    }
    assert!(bar(&narrower) < 40, "{narrower}");
    assert_eq!(
        printed(&narrower).replace('█', ""),
        printed(&whole).replace('█', "")
    );
}

/// The text without its layout: what wrapping must not change.
fn printed(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_whitespace() && !matches!(c, '│' | '├' | '└' | '─'))
        .collect()
}

#[test]
fn bash_completion_is_valid_bash_naming_every_subcommand() {
    let subcommands = [
        "collect",
        "replay",
        "frontend",
        "trace",
        "analyze",
        "explain",
        "cpid-webhook",
        "rules",
        "completions",
        "man",
    ];
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let script = text(&succeeded(kascade().args(["completions", shell])).stdout);
        for sub in subcommands {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
        if shell == "bash" {
            let path = dir.path().join("kascade.bash");
            std::fs::write(&path, &script).unwrap();
            let check = Command::new("bash").arg("-n").arg(&path).output().unwrap();
            assert!(check.status.success(), "{}", text(&check.stderr));
        }
    }
    let out = kascade().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("possible values"),
        "{}",
        text(&out.stderr)
    );
}

/// What `groff` says of a man page (UTF-8, as `man` reads it); `None`
/// without groff.
fn groff_complaints(page: &std::path::Path) -> Option<String> {
    let out = Command::new("groff")
        .args(["-k", "-man", "-Tutf8", "-z", "-Wbreak"])
        .arg(page)
        .output()
        .ok()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    Some(text(&out.stderr))
}

#[test]
fn man_pages_describe_every_subcommand() {
    let page = text(&succeeded(kascade().arg("man")).stdout);
    assert!(page.contains(".TH KASCADE 1"), "{page}");
    let subcommands = page
        .split(".SH SUBCOMMANDS")
        .nth(1)
        .expect("the page lists the subcommands");
    for sub in [
        "collect",
        "replay",
        "frontend",
        "trace",
        "analyze",
        "explain",
        "cpid\\-webhook",
        "rules",
        "completions",
        "man",
    ] {
        assert!(
            subcommands.contains(&format!("kascade\\-{sub}(1)")),
            "{sub} not in {subcommands}"
        );
    }
    for flag in ["color", "quiet", "log\\-format"] {
        assert!(page.contains(&format!("\\-\\-{flag}")), "{flag}");
    }
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    succeeded(kascade().args(["man", "--dir"]).arg(&pages));
    for name in [
        "kascade",
        "kascade-collect",
        "kascade-replay",
        "kascade-frontend",
        "kascade-trace",
        "kascade-analyze",
        "kascade-explain",
        "kascade-cpid-webhook",
        "kascade-rules",
        "kascade-rules-check",
        "kascade-completions",
        "kascade-man",
    ] {
        let path = pages.join(format!("{name}.1"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}.1: {e}"));
        let title = format!(".TH {} 1 ", name.to_uppercase());
        assert!(text.contains(&title), "{name}.1 has no {title:?}");
        if let Some(complaints) = groff_complaints(&path) {
            assert_eq!(complaints, "", "{name}.1");
        }
    }
    // The trace page documents trace's own flags.
    let trace = std::fs::read_to_string(pages.join("kascade-trace.1")).unwrap();
    assert!(trace.contains("\\-\\-max\\-diff\\-lines"), "{trace}");
}

/// What `kascade ARGS` prints on a terminal 70 columns wide (a pty made by
/// util-linux's `script`), escapes kept, line ends as the terminal gets them.
fn on_a_terminal(args: &str, env: &[(&str, &str)]) -> String {
    let command = format!(
        "stty rows 24 cols 70; {} {args}",
        env!("CARGO_BIN_EXE_kascade")
    );
    let out = without_the_tests_settings(Command::new("script"))
        .args(["-qec", &command, "/dev/null"])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("util-linux's script runs kascade on a terminal");
    assert!(out.status.success(), "{args}: {}", text(&out.stdout));
    text(&out.stdout).replace("\r\n", "\n")
}

#[test]
fn on_a_terminal_auto_colours_and_wraps_to_its_width() {
    let log = rollout_log();
    let args = format!("--quiet explain {log}");
    let coloured = on_a_terminal(&args, &[]);
    assert!(coloured.contains(ESC), "{coloured}");
    let ansi = regex::Regex::new("\u{1b}\\[[0-9;]*m").unwrap();
    let plain = ansi.replace_all(&coloured, "");
    assert!(plain.contains("kascade explain"), "{plain}");
    for line in plain.lines() {
        assert!(width(line) <= 70, "{line:?}");
    }
    let uncoloured = on_a_terminal(&args, &[("NO_COLOR", "1")]);
    assert!(!uncoloured.contains(ESC), "{uncoloured}");
    assert_eq!(uncoloured, plain);
    // Quiet, the report is all there is: no progress bar before it, as
    // there is without --quiet.
    assert!(uncoloured.starts_with("kascade explain"), "{uncoloured}");
    let loud = on_a_terminal(&format!("explain {log}"), &[("NO_COLOR", "1")]);
    assert!(loud.contains("KiB/"), "no progress bar: {loud}");
    // On a terminal, `--color never` takes clap's help out of colour too.
    assert!(on_a_terminal("explain --help", &[]).contains(ESC));
    assert!(!on_a_terminal("--color never explain --help", &[]).contains(ESC));
}
