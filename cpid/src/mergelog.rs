//! A mergelog: a new CPID and the CPIDs it merged, the wire format kascade's
//! collector accepts on `POST /cpid/mergelogs`.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::Cpid;

/// Records that `cpid` was minted for a state that reflects all `sources`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mergelog {
    /// The newly minted CPID.
    pub cpid: Cpid,
    /// The CPIDs it merges (at least two, distinct, without `cpid`).
    pub sources: Vec<Cpid>,
    /// When the merge was decided.
    #[serde(with = "rfc3339")]
    pub time: SystemTime,
    /// Which controller merged (optional, shown in traces).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub controller: String,
}

/// What one `POST /cpid/mergelogs` carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergelogBatch {
    pub mergelogs: Vec<Mergelog>,
}

mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339_micros(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        humantime::parse_rfc3339_weak(&s)
            .map_err(|e| serde::de::Error::custom(format!("time {s:?}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_as_json() {
        let m = Mergelog {
            cpid: Cpid::new_random(),
            sources: vec![Cpid::new_random(), Cpid::new_random()],
            time: humantime::parse_rfc3339("2026-11-24T04:00:00.123456Z").unwrap(),
            controller: "config-roller".into(),
        };
        let text = serde_json::to_string(&MergelogBatch {
            mergelogs: vec![m.clone()],
        })
        .unwrap();
        assert!(text.contains("\"time\":\"2026-11-24T04:00:00.123456Z\""));
        let back: MergelogBatch = serde_json::from_str(&text).unwrap();
        assert_eq!(back.mergelogs, vec![m]);
    }

    #[test]
    fn a_bad_cpid_or_time_names_the_value() {
        let e = serde_json::from_str::<Mergelog>(
            r#"{"cpid":"nope","sources":[],"time":"2026-11-24T04:00:00Z"}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("\"nope\""), "{e}");
        let e = serde_json::from_str::<Mergelog>(&format!(
            r#"{{"cpid":"{}","sources":[],"time":"yesterday"}}"#,
            Cpid::new_random()
        ))
        .unwrap_err();
        assert!(e.to_string().contains("\"yesterday\""), "{e}");
    }
}
