//! The **map** step: the source's mapping plugin turns a raw event into zero or more events.
//! A source without a mapping, a disabled mapping, a failing one or an event it emits that
//! is not valid leaves the raw event stored as `unmapped` (with a `plugin.error` saying why):
//! nothing the daemon accepted is dropped.

use std::sync::Arc;

use serde_json::Value as Json;
use serde_json::value::RawValue;

use super::draft::{Draft, plugin_error, unmapped};
use super::normalize::{AttachRaw, normalize};
use crate::plugins::{Hooks, Input, PluginSet};

/// The events the mapping made of `raw` (sent by `source`, in `session_id` if the caller
/// named one; `fallback` otherwise), each checked and normalized, then the mapping's errors.
pub(super) fn map(
    set: &PluginSet,
    source: &str,
    raw: &Arc<Json>,
    verbatim_raw: Option<&Arc<RawValue>>,
    session_id: Option<&str>,
    fallback: &str,
    keep_raw: bool,
) -> Vec<Draft> {
    let attach = match (keep_raw, verbatim_raw) {
        (false, _) => AttachRaw::No,
        (true, Some(text)) => AttachRaw::Verbatim(text),
        (true, None) => AttachRaw::Tree(raw),
    };
    let mut drafts = Vec::new();
    let mut notes = Vec::new();

    match set.mapper(source) {
        None => drafts.push(unmapped(source, fallback, raw, None)),
        // Already reported when it was disabled; its events are kept as they came.
        Some(plugin) if plugin.disabled().is_some() => {
            let why = format!("plugin {} is disabled", plugin.name());
            drafts.push(unmapped(source, fallback, raw, Some(&why)));
        }
        Some(plugin) => {
            let input = Input::Map {
                raw: raw.clone(),
                source: source.to_string(),
                session_id: session_id.map(str::to_string),
            };
            match plugin.call(Hooks::MAP, input) {
                Ok(events) => {
                    for e in events {
                        match normalize(e, fallback, source, attach, None) {
                            Ok(d) => drafts.push(d),
                            Err(why) => {
                                notes.push(plugin_error(plugin, "map", &why, None, fallback));
                                drafts.push(unmapped(source, fallback, raw, Some(&why)));
                            }
                        }
                    }
                }
                Err(f) => {
                    let why = f.error.to_string();
                    notes.push(plugin_error(plugin, "map", &why, Some(&f), fallback));
                    drafts.push(unmapped(source, fallback, raw, Some(&why)));
                }
            }
        }
    }
    drafts.append(&mut notes);
    drafts
}
