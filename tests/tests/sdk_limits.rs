//! Whatever `append` accepts, every reader returns intact: a property over generated payloads
//! (depths up to the limit, sizes up to the frame limit), checked through the Rust SDK (read,
//! subscribe, query, async and blocking) and the CLI (`dstream tail --json`). Deeper events are
//! refused at append with a clear error, so nothing acked is unreadable.
#![cfg(unix)]

use std::process::Command;
use std::time::Duration;

use dstream_sdk::event::MAX_NESTING_DEPTH;
use dstream_sdk::protocol::QueryParams;
use dstream_sdk::{NewEvent, SubscriptionItem};
use dstream_tests::Daemon;
use dstream_tests::serde_json::{Value, json};

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn text(&mut self, len: usize) -> String {
        const PIECES: [&str; 8] = ["a", "Z", "\"", "\\", "\n", "é", "🦀", "\u{1}"];
        (0..len)
            .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
            .collect()
    }
}

/// A value nested exactly `depth` levels (objects and arrays mixed), with `filler` bytes of text
/// at the bottom.
fn nested(rng: &mut Rng, depth: usize, filler: usize) -> Value {
    let mut v = json!(rng.text(filler));
    for level in 0..depth {
        v = if rng.below(2) == 0 {
            json!({ format!("k{level}"): v, "n": level })
        } else {
            json!([level, v, null])
        };
    }
    v
}

fn dstream(socket: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(dstream_tests::daemon_bin())
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
        .unwrap()
}

#[test]
fn every_accepted_payload_reads_back_intact_through_the_sdk_and_the_cli() {
    let d = Daemon::start_with("[daemon]\nmax_frame_bytes = 262144\n");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let session = "prop";
    let mut sent = Vec::new();
    rt.block_on(async {
        let client = dstream_sdk::Client::connect(d.socket()).await.unwrap();
        let mut cases: Vec<(usize, usize)> = (0..=MAX_NESTING_DEPTH).map(|d| (d, 20)).collect();
        // Large ones, up to just under the frame limit.
        for _ in 0..6 {
            let depth = rng.below(MAX_NESTING_DEPTH as u64 + 1) as usize;
            cases.push((depth, 20_000 + rng.below(30_000) as usize));
        }
        for (depth, filler) in cases {
            let payload = nested(&mut rng, depth, filler);
            let metadata = json!({"m": nested(&mut rng, depth.saturating_sub(1), 3)});
            let event = NewEvent::new("prop.case")
                .payload(payload.clone())
                .metadata(metadata.clone());
            let ack = client
                .append(session, event)
                .await
                .unwrap_or_else(|e| panic!("depth {depth}, {filler} bytes refused: {e}"));
            sent.push((ack.lsn, payload, metadata));
        }
        // Too deep: refused with a message that names the limit, and nothing stored.
        for depth in [MAX_NESTING_DEPTH + 1, MAX_NESTING_DEPTH + 30, 200] {
            let event = NewEvent::new("prop.deep").payload(nested(&mut rng, depth, 1));
            let err = client
                .append(session, event)
                .await
                .expect_err("too deep must be refused");
            let msg = err.to_string();
            assert!(
                msg.contains(&MAX_NESTING_DEPTH.to_string()),
                "depth {depth}: {msg}"
            );
        }

        let check = |events: &[dstream_sdk::Event], how: &str| {
            assert_eq!(events.len(), sent.len(), "{how}: every accepted event");
            for (e, (lsn, payload, metadata)) in events.iter().zip(&sent) {
                assert_eq!(e.lsn, *lsn, "{how}");
                assert_eq!(&e.payload, payload, "{how}: lsn {lsn}");
                assert_eq!(e.metadata.as_ref(), Some(metadata), "{how}: lsn {lsn}");
            }
        };
        let mut read = Vec::new();
        let mut from = 1;
        loop {
            let page = client.read(session, from, Some(7)).await.unwrap();
            read.extend(page.events);
            from = page.next_lsn;
            if page.up_to_date {
                break;
            }
        }
        check(&read, "read");

        let q = client
            .query(&QueryParams {
                session_id: Some(session.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        check(&q.events, "query");

        let mut sub = client.subscribe(session, 1).await.unwrap();
        let mut got = Vec::new();
        while got.len() < sent.len() {
            match tokio::time::timeout(Duration::from_secs(20), sub.next()).await {
                Ok(Some(Ok(SubscriptionItem::Event(e)))) => got.push(*e),
                Ok(Some(Ok(_))) => {}
                other => panic!("subscription ended early: {other:?}"),
            }
        }
        check(&got, "subscribe");
    });

    // The blocking client reads the same.
    let blocking = dstream_sdk::blocking::Client::connect(d.socket()).unwrap();
    let page = blocking.read(session, 1, Some(100_000)).unwrap();
    assert_eq!(page.events.len(), sent.len(), "blocking read");

    // The CLI prints every one of them as JSON that parses back to the same payload.
    let out = dstream(&d.socket(), &["tail", session, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("tail --json prints JSON"))
        .collect();
    assert_eq!(lines.len(), sent.len(), "tail --json");
    for (line, (lsn, payload, _)) in lines.iter().zip(&sent) {
        assert_eq!(line["lsn"], json!(lsn));
        assert_eq!(&line["payload"], payload, "tail --json lsn {lsn}");
    }
}
