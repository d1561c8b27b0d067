//! `replay` against a receiver that is missing or stops answering.

use super::*;

#[test]
fn replay_without_a_receiver_fails_naming_the_address() {
    // A port nothing listens on: bound, then closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let e = error_of(&[
        "replay",
        &fixture("deployment"),
        "--otlp-endpoint",
        &endpoint,
        "--otlp-wait",
        "2s",
    ]);
    assert!(
        e.contains(&format!(
            "cannot reach the OTLP receiver at {endpoint} (--otlp-endpoint)"
        )),
        "{e}"
    );
    assert!(e.contains("--otlp-wait"), "{e}");
}

#[test]
fn replay_stops_when_its_receiver_stops_answering() {
    // A receiver whose port still takes connections but whose process
    // answers none (stuck, or gone behind a proxy): every connection is
    // accepted and closed at once. A plain TCP peer, not a fake receiver.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kascade"))
        .args([
            "replay",
            &fixture("deployment"),
            "--otlp-endpoint",
            &endpoint,
        ])
        .args(["--otlp-wait", "2s"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut pipe, &mut text).unwrap();
        text
    });
    // Bounded: 2 s of retries, not --export-retry-for (5 minutes) for each
    // batch. The limit is far above the 2 s, for a busy machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("replay still retrying after 2 minutes");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let stderr = stderr.join().unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the OTLP receiver at {endpoint} (--otlp-endpoint) stopped taking spans:"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("after 2s of retries (0 were)"), "{stderr}");
}
