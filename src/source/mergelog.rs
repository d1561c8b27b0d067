//! Mergelogs from instrumented controllers (`kascade-cpid`): the body of
//! `POST /cpid/mergelogs` (a `kascade_cpid::MergelogBatch`), decoded and checked item by item, so an error
//! names the item and what is wrong with it.

use kascade_cpid::Mergelog;
use serde::Deserialize;
use serde_json::value::RawValue;

/// Mergelogs per request.
pub const MAX_MERGELOGS_PER_REQUEST: usize = 10_000;
/// Sources of one merge (a controller acting on more changes at once is
/// reporting something else).
pub const MAX_SOURCES: usize = 64;

/// The mergelogs of a request body, or why it is refused: the whole request
/// is refused when any item is bad (the sender drops it, counting it), so a
/// merge graph never holds half a batch of a broken sender.
pub fn decode_mergelogs(body: &[u8]) -> Result<Vec<Mergelog>, String> {
    #[derive(Deserialize)]
    struct Items<'a> {
        #[serde(borrow)]
        mergelogs: Vec<&'a RawValue>,
    }
    let items: Items<'_> = serde_json::from_slice(body)
        .map_err(|e| format!("body is not a mergelog batch ({{\"mergelogs\": [...]}}): {e}"))?;
    if items.mergelogs.len() > MAX_MERGELOGS_PER_REQUEST {
        return Err(format!(
            "{} mergelogs in one request; at most {MAX_MERGELOGS_PER_REQUEST}",
            items.mergelogs.len()
        ));
    }
    let mut out = Vec::with_capacity(items.mergelogs.len());
    for (i, raw) in items.mergelogs.iter().enumerate() {
        let m: Mergelog = serde_json::from_str(raw.get()).map_err(|e| {
            format!(
                "mergelogs[{i}]: {}",
                crate::messages::clip_message(e.to_string())
            )
        })?;
        check(&m).map_err(|e| format!("mergelogs[{i}] (cpid {}): {e}", m.cpid))?;
        out.push(m);
    }
    Ok(out)
}

fn check(m: &Mergelog) -> Result<(), String> {
    if m.sources.is_empty() {
        return Err("no sources".into());
    }
    if m.sources.len() > MAX_SOURCES {
        return Err(format!(
            "{} sources; at most {MAX_SOURCES}",
            m.sources.len()
        ));
    }
    if m.sources.contains(&m.cpid) {
        return Err("the new CPID is one of its own sources (a cycle)".into());
    }
    for (i, s) in m.sources.iter().enumerate() {
        if m.sources[..i].contains(s) {
            return Err(format!("source {s} listed twice"));
        }
    }
    if m.controller.len() > crate::bounds::MAX_NAME_BYTES {
        return Err(format!(
            "controller name of {} bytes; at most {}",
            m.controller.len(),
            crate::bounds::MAX_NAME_BYTES
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kascade_cpid::Cpid;

    fn body(items: &[String]) -> String {
        format!("{{\"mergelogs\":[{}]}}", items.join(","))
    }

    fn item(cpid: Cpid, sources: &[Cpid]) -> String {
        let s: Vec<String> = sources.iter().map(|c| format!("\"{c}\"")).collect();
        format!(
            "{{\"cpid\":\"{cpid}\",\"sources\":[{}],\"time\":\"2026-11-24T05:00:00Z\",\"controller\":\"roller\"}}",
            s.join(",")
        )
    }

    #[test]
    fn decodes_a_batch() {
        let (a, b, n) = (Cpid::new_random(), Cpid::new_random(), Cpid::new_random());
        let got = decode_mergelogs(body(&[item(n, &[a, b])]).as_bytes()).unwrap();
        assert_eq!(got[0].sources, vec![a, b]);
        assert_eq!(got[0].controller, "roller");
    }

    #[test]
    fn bad_items_are_named_with_what_is_wrong() {
        let (a, n) = (Cpid::new_random(), Cpid::new_random());
        let good = item(n, &[a]);
        let cases = [
            (item(n, &[]), "mergelogs[1]", "no sources"),
            (item(n, &[a, n]), "mergelogs[1]", "a cycle"),
            (item(n, &[a, a]), "mergelogs[1]", "listed twice"),
            (
                item(n, &(0..65).map(|_| Cpid::new_random()).collect::<Vec<_>>()),
                "mergelogs[1]",
                "65 sources",
            ),
            (
                good.replace(&n.to_string(), "not-a-uuid"),
                "mergelogs[1]",
                "\"not-a-uuid\"",
            ),
        ];
        for (bad, at, what) in cases {
            let e = decode_mergelogs(body(&[good.clone(), bad]).as_bytes()).unwrap_err();
            assert!(e.starts_with(at) && e.contains(what), "{e}");
        }
        let e = decode_mergelogs(b"[1,2]").unwrap_err();
        assert!(e.starts_with("body is not a mergelog batch"), "{e}");
    }

    #[test]
    fn a_flood_in_one_request_is_refused() {
        let one = item(Cpid::new_random(), &[Cpid::new_random()]);
        let many = vec![one; MAX_MERGELOGS_PER_REQUEST + 1];
        let e = decode_mergelogs(body(&many).as_bytes()).unwrap_err();
        assert!(e.contains("10001 mergelogs"), "{e}");
    }
}
