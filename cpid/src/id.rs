//! The CPID itself: a random UUID, written lowercase and hyphenated.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// A change propagation ID. 128 random bits, like an OpenTelemetry trace id
/// (kascade uses the same bits as the trace id of the change's merge record).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cpid(Uuid);

/// Why a string is not a CPID. The message quotes (a bounded prefix of) the
/// input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpidError {
    #[error("CPID {0:?} is not a UUID (8-4-4-4-12 hex digits)")]
    NotUuid(String),
    #[error("CPID {0:?}… is too long ({1} bytes; a UUID has 36)")]
    TooLong(String, usize),
    #[error("the nil UUID is not a CPID")]
    Nil,
    #[error("traceparent {0:?} is not version-00 W3C trace context")]
    NotTraceparent(String),
}

fn prefix(s: &str) -> String {
    s.chars().take(48).collect()
}

impl Cpid {
    /// A fresh random CPID.
    pub fn new_random() -> Self {
        Cpid(Uuid::new_v4())
    }

    /// Parses the hyphenated form only (what the annotation holds); other
    /// UUID spellings would make one change look like two.
    pub fn parse(s: &str) -> Result<Self, CpidError> {
        if s.len() > 36 {
            return Err(CpidError::TooLong(prefix(s), s.len()));
        }
        if s.len() != 36 {
            return Err(CpidError::NotUuid(prefix(s)));
        }
        let id = Uuid::try_parse(s).map_err(|_| CpidError::NotUuid(prefix(s)))?;
        if id.is_nil() {
            return Err(CpidError::Nil);
        }
        Ok(Cpid(id))
    }

    /// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`)
    /// as a CPID.
    pub fn from_traceparent(s: &str) -> Result<Self, CpidError> {
        let bad = || CpidError::NotTraceparent(prefix(s));
        let parts: Vec<&str> = s.trim().split('-').collect();
        let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
        if parts.len() != 4
            || parts[0] != "00"
            || !hex(parts[1], 32)
            || !hex(parts[2], 16)
            || !hex(parts[3], 2)
        {
            return Err(bad());
        }
        let bits = u128::from_str_radix(parts[1], 16).map_err(|_| bad())?;
        if bits == 0 {
            return Err(bad());
        }
        Ok(Cpid(Uuid::from_u128(bits)))
    }

    /// The 16 bytes, e.g. as an OpenTelemetry trace id.
    pub fn to_bytes(self) -> [u8; 16] {
        *self.0.as_bytes()
    }

    /// The CPID whose bytes these are (the inverse of [`Cpid::to_bytes`]);
    /// `None` for all zeroes.
    pub fn from_bytes(bytes: [u8; 16]) -> Option<Self> {
        let id = Uuid::from_bytes(bytes);
        (!id.is_nil()).then_some(Cpid(id))
    }
}

impl fmt::Display for Cpid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl fmt::Debug for Cpid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cpid({self})")
    }
}

impl FromStr for Cpid {
    type Err = CpidError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Cpid::parse(s)
    }
}

impl Serialize for Cpid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cpid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Cpid::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_hyphenated_form_and_prints_it_back() {
        let s = "3f2b8c1e-7d4a-4e6f-9a1b-2c3d4e5f6a7b";
        assert_eq!(Cpid::parse(s).unwrap().to_string(), s);
        let upper = Cpid::parse(&s.to_uppercase()).unwrap();
        assert_eq!(upper.to_string(), s, "printed lowercase");
    }

    #[test]
    fn rejects_what_is_not_a_cpid_with_the_input_in_the_message() {
        let e = Cpid::parse("hello").unwrap_err();
        assert!(e.to_string().contains("\"hello\""), "{e}");
        assert!(matches!(
            Cpid::parse("3f2b8c1e7d4a4e6f9a1b2c3d4e5f6a7b"),
            Err(CpidError::NotUuid(_))
        ));
        let long = "a".repeat(5000);
        let e = Cpid::parse(&long).unwrap_err();
        assert!(matches!(e, CpidError::TooLong(_, 5000)));
        assert!(e.to_string().len() < 200, "message bounded: {e}");
        assert_eq!(
            Cpid::parse("00000000-0000-0000-0000-000000000000"),
            Err(CpidError::Nil)
        );
        assert!(matches!(
            Cpid::parse("zzzzzzzz-7d4a-4e6f-9a1b-2c3d4e5f6a7b"),
            Err(CpidError::NotUuid(_))
        ));
    }

    #[test]
    fn a_traceparent_trace_id_is_the_cpid() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let c = Cpid::from_traceparent(tp).unwrap();
        assert_eq!(c.to_string(), "4bf92f35-77b3-4da6-a3ce-929d0e0e4736");
        for bad in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            assert!(Cpid::from_traceparent(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bytes_round_trip() {
        let c = Cpid::new_random();
        assert_eq!(Cpid::from_bytes(c.to_bytes()), Some(c));
        assert_eq!(Cpid::from_bytes([0; 16]), None);
    }
}
