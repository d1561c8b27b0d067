//! An audit event's response object parsed and redacted ahead of its
//! processing, on another thread.

use crate::aggregate::redact::Redactor;
use crate::flow::{Accepted, is_event_resource};
use crate::json::Value;

/// An audit event's response object parsed (and redacted) ahead of the
/// event's processing: offline runs prepare it on their decode thread,
/// beside the processor's, where parsing and redacting would otherwise be
/// the largest part of the processor's work per write.
#[derive(Debug)]
pub struct ParsedResponse {
    pub(super) object: Option<Value>,
    /// The values that redaction replaced.
    pub(super) hidden: crate::aggregate::redact::HiddenValues,
    /// Redacted by the processor's redactor already.
    pub(super) redacted: bool,
    /// That redaction replaced something: `object` is no longer the text
    /// parsed.
    pub(super) changed: bool,
}

impl ParsedResponse {
    /// `item`'s response object parsed as processing parses it, if
    /// processing would (a write of an object that succeeded and answered
    /// with one), and redacted by `redactor` (pass the processor's when it
    /// redacts: [`super::Processor::sees_whole_objects`]); `None` otherwise.
    pub fn ahead_of(item: &Accepted, redactor: Option<&Redactor>) -> Option<ParsedResponse> {
        if is_event_resource(&item.object.group, &item.object.resource)
            || item.failed_create.is_some()
            || item.event.code() >= 400
        {
            return None;
        }
        let text = item.event.response_object.as_ref()?;
        let mut object = text.parse().ok();
        let mut changed = false;
        let mut hidden = Default::default();
        if let (Some(redactor), Some(object)) = (redactor, object.as_mut()) {
            (changed, hidden) = redactor.redact_parsed_noting(
                &item.object.group,
                &item.object.resource,
                object,
                text.get(),
            );
        }
        Some(ParsedResponse {
            object,
            hidden,
            redacted: redactor.is_some(),
            changed,
        })
    }
}
