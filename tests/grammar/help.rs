//! Help shows only the flags that apply; modes a format cannot show are
//! refused.

use super::*;

#[test]
fn each_help_shows_only_flags_that_apply_and_says_what_they_do_there() {
    let help = |sub: &str| stdout_of(&[sub, "--help"]);
    let trace = help("trace");
    for frontend_only in ["--concurrency", "--default-scope", "Raw reads"] {
        assert!(
            !trace.contains(frontend_only),
            "trace --help: {frontend_only}"
        );
    }
    for own in [
        "--object",
        "-n, --namespace",
        "--window",
        "--max-trace-bytes",
    ] {
        assert!(trace.contains(own), "trace --help lacks {own}");
    }
    assert!(!trace.contains("collector uses"), "trace --help: {trace}");
    let frontend = help("frontend");
    for flag in [
        "--concurrency",
        "--default-scope",
        "--window",
        "--max-depth",
    ] {
        assert!(frontend.contains(flag), "frontend --help lacks {flag}");
    }
    // 429 is the webhook's answer: only `collect` has a webhook.
    for sub in ["replay", "trace", "analyze", "explain", "frontend"] {
        assert!(!help(sub).contains("429"), "{sub} --help speaks of 429");
    }
    let replay = help("replay");
    assert!(replay.contains("a full queue pauses reading"), "{replay}");
    assert!(!replay.contains("replicas and restarts"), "{replay}");
    assert!(help("analyze").contains("--object <RESOURCE/NAME>"));
    assert!(help("collect").contains("429"));
}

#[test]
fn a_display_mode_text_or_json_cannot_show_is_refused_not_replaced() {
    let log = fixture("deployment");
    let object = ["--object", "deploy/hello", "-n", "default"];
    for mode in ["tree", "timeline", "grouped"] {
        let mut args = vec!["trace", log.as_str(), "--mode", mode];
        args.extend(object);
        let e = error_of(&args);
        assert!(
            e.contains(&format!(
                "--mode {mode} cannot be shown as --format text, which shows tracing and cascade"
            )),
            "{e}"
        );
        args.extend(["--format", "otlp-json"]);
        stdout_of(&args);
    }
    let mut args = vec![
        "trace",
        log.as_str(),
        "--format",
        "json",
        "--mode",
        "cascade",
    ];
    args.extend(object);
    assert!(error_of(&args).contains("which shows tracing"));
    let mut args = vec!["trace", log.as_str(), "--mode", "cascade"];
    args.extend(object);
    stdout_of(&args);
}
