//! The **process** step: every filter plugin, in priority order, over each event, then the
//! native redaction. Its own file because the handle runs it too, on events that did not come
//! in through `ingest` (an SDK caller's checkpoint request).

use std::sync::Arc;

use serde_json::Value as Json;

use super::draft::{Draft, object, plugin_error};
use super::normalize::{AttachRaw, normalize};
use crate::plugins::{Hooks, Input, PluginSet};

/// The filters, in order: each may keep, change, split or drop every event. A failing filter
/// passes the event on unchanged, with a `plugin.error` in `notes`.
pub(super) fn process(
    set: &PluginSet,
    redactor: &crate::redact::Redactor,
    mut drafts: Vec<Draft>,
    source: &str,
    raw: &Json,
    notes: &mut Vec<Draft>,
) -> Vec<Draft> {
    if set.with(Hooks::PROCESS).any(|p| p.disabled().is_none()) {
        // A filter sees the whole event, the raw event it came from included.
        for d in &mut drafts {
            d.raw_in_tree(raw);
        }
    }
    for plugin in set.with(Hooks::PROCESS) {
        if plugin.disabled().is_some() {
            continue;
        }
        let mut next = Vec::with_capacity(drafts.len());
        for mut draft in drafts {
            if plugin.meta.process_if_contains.is_some() {
                let mut text = serde_json::to_vec(&draft.event).unwrap_or_default();
                text.make_ascii_lowercase();
                if !plugin.wants(&text) {
                    next.push(draft);
                    continue;
                }
            }
            draft
                .event
                .insert("session_id".into(), Json::String(draft.session_id.clone()));
            let passing = draft
                .event
                .get("type")
                .and_then(Json::as_str)
                .map(str::to_string);
            let event = Arc::new(Json::Object(draft.event));
            let out = plugin
                .call(Hooks::PROCESS, Input::Event(event.clone()))
                .map_err(|f| (f.error.to_string(), Some(f)))
                .and_then(|out| {
                    out.into_iter()
                        .map(|e| {
                            normalize(
                                e,
                                &draft.session_id,
                                source,
                                AttachRaw::No,
                                passing.as_deref(),
                            )
                        })
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|why| (why, None))
                });
            match out {
                Ok(out) => next.extend(out),
                Err((why, failure)) => {
                    // The event goes on as it came in.
                    let mut event = object(Arc::unwrap_or_clone(event));
                    event.remove("session_id");
                    notes.push(plugin_error(
                        plugin,
                        "process",
                        &why,
                        failure.as_ref(),
                        &draft.session_id,
                    ));
                    next.push(Draft::new(draft.session_id, event));
                }
            }
        }
        drafts = next;
    }
    // After every filter, so none can add a secret back; before decide, so rules,
    // checkpoints and `on_event` see what is stored.
    for d in &mut drafts {
        redactor.redact_event_map(&mut d.event);
    }
    drafts
}
