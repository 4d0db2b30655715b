//! Power-loss simulation of checkpoints: requests and decisions on the simulated disk, cut by
//! a power failure at a random call, restarted from what survived.
//!
//! After every restart: every checkpoint whose request was acknowledged is known (pending, or
//! decided), every acknowledged decision stands as it was made, and nothing decided comes back
//! open. Markers, the id journal and grants go through the same file layer as the logs, so a
//! crash between any two of their writes is covered.
//!
//! Seeds replay with `DSTREAM_SIM_SEED=<n>`, like the store's simulation.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::api::Checkpoints;
use super::types::{NewRequest, Prepared, Resolution, default_options};
use crate::hub::Hub;
use crate::store::power_loss::{DATA, fail, new_disk, runtime, settings};
use crate::store::{Ack, NewEventRaw, Store};
use crate::vfs::sim::SimRng;

#[derive(Debug, Clone, PartialEq)]
enum Known {
    Pending,
    Decided(String),
}

fn request(session: &str, key: &str) -> NewRequest {
    NewRequest {
        session_id: session.into(),
        key: key.into(),
        tool: Some("Bash".into()),
        input: Some(serde_json::json!({"command": format!("rm -rf {key}")})),
        summary: format!("run {key}"),
        options: default_options(false),
        // Nothing expires during a run: outcomes come from decisions only.
        timeout_ms: 3_600_000,
        on_timeout: None,
        rule: Some("sim".into()),
        input_glob: None,
        source: Some("test".into()),
        cwd: None,
        causation_id: None,
    }
}

fn filler(n: u64) -> NewEventRaw {
    serde_json::from_value(serde_json::json!({
        "type": "message.chunk",
        "payload": {"n": n, "text": "x".repeat(300)},
    }))
    .unwrap()
}

/// Checks every checkpoint the model knows against a restarted daemon.
/// (The model maps a checkpoint id to its session and what is known of it.)
fn check(seed: u64, checkpoints: &Checkpoints, model: &BTreeMap<String, (String, Known)>) {
    for (id, (session, known)) in model {
        // Open ones are rebuilt at start (their deadlines must run); decided ones are found in
        // their session's log when asked for.
        let rebuilt = checkpoints.get(id);
        let found = checkpoints.find(id, Some(session));
        if let Some(info) = checkpoints.get(id)
            && info.decision.is_none()
            && rebuilt.is_none()
        {
            fail(
                seed,
                format!("open checkpoint {id} was not rebuilt at start: {info:?}"),
            );
        }
        let Some(info) = found.ok().and_then(|()| checkpoints.get(id)) else {
            fail(
                seed,
                format!("checkpoint {id} ({known:?}) is gone after restart"),
            );
        };
        let decided = info.decision.as_ref().map(|d| d.decision.clone());
        match (known, decided) {
            (Known::Pending, None) => {}
            // A decision made just before the crash and acknowledged after: fine.
            (Known::Pending, Some(_)) => {}
            (Known::Decided(want), Some(got)) if *want == got => {}
            (Known::Decided(want), got) => fail(
                seed,
                format!("checkpoint {id} was decided {want:?}; after restart it is {got:?}"),
            ),
        }
    }
}

async fn run_seed(seed: u64) -> (u64, u64) {
    let mut rng = SimRng::new(seed ^ 0xC0FFEE);
    let settings = settings(&mut rng);
    let mut vfs = new_disk();
    let mut model: BTreeMap<String, (String, Known)> = BTreeMap::new();
    let (mut requested, mut decided) = (0, 0);
    let mut key = 0u64;
    let rounds = 2 + rng.below(3);
    for round in 0..=rounds {
        let last = round == rounds;
        let opened = Store::open_on(
            Arc::new(vfs.clone()),
            Path::new(DATA),
            settings.clone(),
            Hub::new(1 << 20),
        )
        .await;
        let store = match opened {
            Ok((store, _)) => store,
            Err(e) => fail(seed, format!("store startup failed in round {round}: {e}")),
        };
        let checkpoints = match Checkpoints::start(store.clone(), Path::new(DATA), 60_000) {
            Ok(c) => c,
            Err(e) => fail(seed, format!("checkpoints startup failed: {e}")),
        };
        check(seed, &checkpoints, &model);
        if last {
            break;
        }
        vfs.crash_after(1 + rng.below(300));
        for _ in 0..200 {
            let session = format!("cs{}", rng.below(4));
            let alive = match rng.below(5) {
                // An agent asks.
                0 | 1 => {
                    key += 1;
                    match checkpoints.prepare(request(&session, &format!("k{key}"))) {
                        Ok(Prepared::New {
                            info,
                            event_id,
                            event,
                        }) => match checkpoints.record(info, event_id, event).await {
                            Ok(info) => {
                                requested += 1;
                                model.insert(info.id, (session, Known::Pending));
                                true
                            }
                            Err(_) => false,
                        },
                        Ok(Prepared::Existing(_)) => true,
                        Err(_) => false,
                    }
                }
                // A person decides one that is open.
                2 => {
                    let open: Vec<String> = model
                        .iter()
                        .filter(|(_, (_, k))| *k == Known::Pending)
                        .map(|(id, _)| id.clone())
                        .collect();
                    if open.is_empty() {
                        continue;
                    }
                    let id = open[rng.below(open.len() as u64) as usize].clone();
                    let option = ["approve", "reject", "approve_session"][rng.below(3) as usize];
                    let r = Resolution {
                        decision: option.into(),
                        note: None,
                        input: None,
                        decided_by: "user:sim".into(),
                        uid: None,
                    };
                    match checkpoints.resolve(&id, r).await {
                        Ok(_) => {
                            decided += 1;
                            if let Some(entry) = model.get_mut(&id) {
                                entry.1 = Known::Decided(option.into());
                            }
                            true
                        }
                        Err(_) => false,
                    }
                }
                // The session goes on (and the write-ahead log wraps).
                _ => {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    key += 1;
                    store.append_all(vec![(
                        session,
                        filler(key),
                        false,
                        Ack::new(move |r| drop(tx.send(r))),
                    )]);
                    matches!(rx.await, Ok(Ok(_)))
                }
            };
            if !alive {
                break;
            }
        }
        vfs.crash_now();
        drop(checkpoints);
        drop(store);
        vfs = vfs.reboot(&mut rng).0;
    }
    (requested, decided)
}

#[test]
fn acknowledged_checkpoints_and_decisions_survive_simulated_power_loss() {
    let rt = runtime();
    let seeds: Vec<u64> = match std::env::var("DSTREAM_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        None => (0..40).collect(),
    };
    let (mut requested, mut decided) = (0, 0);
    for seed in seeds {
        let (r, d) = rt.block_on(run_seed(seed));
        requested += r;
        decided += d;
    }
    eprintln!("checkpoint power-loss simulation: {requested} requests, {decided} decisions");
    assert!(requested > 0 && decided > 0);
}
