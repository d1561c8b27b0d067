//! Bounds on what requests and audit events may carry: Kubernetes' own
//! limits on names, namespaces and user texts, checked where input enters.

use crate::messages::quote;

/// Object names (DNS subdomains), API groups, resources, cluster names.
pub(crate) const MAX_NAME_BYTES: usize = 253;
/// Namespaces are DNS labels.
pub(crate) const MAX_NAMESPACE_BYTES: usize = 63;
/// User names and user agents (the apiserver truncates user agents in audit
/// events to 1 KiB; user names from certificates or OIDC are shorter still).
pub(crate) const MAX_TEXT_BYTES: usize = 4096;
/// An error unless `value` (the input `what`) is at most `max` bytes.
pub(crate) fn check_len(what: &str, value: &str, max: usize) -> Result<(), String> {
    if value.len() <= max {
        Ok(())
    } else {
        Err(format!(
            "{what} {} is {} bytes, longer than the {max} allowed",
            quote(value),
            value.len()
        ))
    }
}

/// The most a name-like field (`resource`, `name`, …) may be, by field name.
pub(crate) fn max_name_bytes(field: &str) -> usize {
    if field == "namespace" {
        MAX_NAMESPACE_BYTES
    } else {
        MAX_NAME_BYTES
    }
}

/// Whether every part of `o` is within Kubernetes' bounds, i.e. it names an
/// object that can exist.
pub(crate) fn object_within_bounds(o: &crate::model::ObjectRef) -> bool {
    [&o.cluster, &o.group, &o.resource, &o.name]
        .iter()
        .all(|f| f.len() <= MAX_NAME_BYTES)
        && o.namespace.len() <= MAX_NAMESPACE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_longer_than_their_bound_are_refused_quoted() {
        let e = check_len("name", &"n".repeat(254), MAX_NAME_BYTES).unwrap_err();
        assert!(e.contains("254 bytes, longer than the 253 allowed"), "{e}");
        assert!(check_len("name", &"n".repeat(253), MAX_NAME_BYTES).is_ok());
    }
}
