//! The daemon run in-process through its library API (`server::start` + `server::run`), as an
//! embedding program or a test would, driven by the SDK over the real socket.
#![cfg(unix)]

use dstream_daemon::{Config, server};
use dstream_sdk::{Client, NewEvent, SubscriptionItem};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_runs_in_process_and_stops_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.daemon.socket = dir.path().join("run/d.sock");
    config.daemon.data_dir = dir.path().join("data");
    config.plugins.dir = dir.path().join("plugins");
    let socket = config.socket_path();

    let started = server::start(config.clone()).await.unwrap();
    let state = started.state.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(server::run(started, async {
        let _ = stopped.await;
    }));

    let client = Client::connect(&socket).await.unwrap();
    let mut sub = client.subscribe("inproc", 1).await.unwrap();
    for i in 0..3 {
        let ack = client
            .append(
                "inproc",
                NewEvent::new("user.input").payload(json!({"i": i})),
            )
            .await
            .unwrap();
        assert_eq!(ack.lsn, i + 1);
    }
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match sub.next().await.unwrap().unwrap() {
            SubscriptionItem::Event(e) => seen.push(e.payload["i"].as_u64().unwrap()),
            _ => continue,
        }
    }
    assert_eq!(seen, [0, 1, 2]);
    // The shared state is the daemon's own: its store sees what the socket wrote.
    assert_eq!(state.store.get("inproc").unwrap().committed_lsn(), 3);

    stop.send(()).unwrap();
    daemon.await.unwrap();
    assert!(!socket.exists(), "a clean stop removes the socket");
    drop(state); // releases the data directory's lock

    // Everything acknowledged is on disk: a second in-process daemon reads it back.
    let started = server::start(config).await.unwrap();
    let page = started.state.store.read("inproc", 1, 10).await.unwrap();
    assert_eq!(page.events.len(), 3);
}
