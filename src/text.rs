//! Small text helpers shared by every stage.

use std::borrow::Cow;

/// `s` cut to at most `max` bytes at a character boundary, saying how long it
/// was: error messages echo input, and input can be megabytes.
pub fn clip(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes in all)", &s[..cut], s.len()))
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clips_long_text_at_a_char_boundary_and_names_its_length() {
        assert_eq!(clip("short", 10), "short");
        let long = "é".repeat(100);
        let c = clip(&long, 5);
        assert_eq!(c, "éé… (200 bytes in all)");
    }
}
