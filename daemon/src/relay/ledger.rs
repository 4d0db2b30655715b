//! The per-session relay ledger: what the remote stream holds, written atomically before
//! every batch leaves, so that delivery is exactly once across restarts and `kill -9`.
//!
//! The rule that makes it work: a batch's sequence number and its LSN range are on disk
//! (`inflight`) before the POST is sent. After a crash the same range is sent again with the
//! same `Producer-Seq`, and the server answers 204 if it already has it. A batch is never
//! re-cut differently under a number the server may have seen.
//!
//! The batches after the one in flight may be recorded too (`queued`), several in one write
//! that overlaps a POST; each leaves only once the one before it is acknowledged, so the
//! server still sees one batch at a time, in order, and a restart resends them as they were
//! cut.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::vfs::Vfs;

use serde::{Deserialize, Serialize};

/// One batch that may have reached the server: resent as is until acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inflight {
    pub seq: u64,
    pub first_lsn: u64,
    pub last_lsn: u64,
    /// The batch closes the stream (`Stream-Closed: true`); `first_lsn > last_lsn` when it
    /// carries no events.
    #[serde(default)]
    pub close: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// `{url}/{prefix}` this ledger describes; another target starts from scratch.
    #[serde(default)]
    pub target: String,
    /// The remote stream exists (PUT answered 200 or 201).
    #[serde(default)]
    pub created: bool,
    pub epoch: u64,
    /// The `Producer-Seq` of the next new batch.
    pub next_seq: u64,
    /// Every event up to this LSN is on the remote stream, once.
    pub acked_lsn: u64,
    /// The remote tail after the last acknowledged batch (`Stream-Next-Offset`): where a
    /// resync starts reading instead of the stream's beginning.
    #[serde(default)]
    pub remote_offset: Option<String>,
    #[serde(default)]
    pub inflight: Option<Inflight>,
    /// The batches after `inflight`, consecutive in seq and LSNs, cut and written while an
    /// earlier one was on the wire; each is sent after the one before it is acknowledged,
    /// as it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<Inflight>,
    /// The remote stream was closed (the session ended, or was archived).
    #[serde(default)]
    pub closed: bool,
    /// It was closed because the session was archived: a resumed session goes on in the
    /// stream the archive announcement names.
    #[serde(default)]
    pub closed_for_archive: bool,
    /// The remote stream's name when it is not the session id (a continuation after an
    /// archive, `<session>~<n>`), and the LSN after which it begins.
    #[serde(default)]
    pub stream: Option<String>,
    #[serde(default)]
    pub stream_start: u64,
    /// `(last LSN, offset)` after some acknowledged batches of the stream, oldest first:
    /// where a fork of this session can start on the server (see [`Ledger::mark`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<(u64, String)>,
    /// The stream was created as a remote fork of its parent's (`Stream-Forked-From`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remote_fork: bool,
    /// Where the control stream was read up to.
    #[serde(default)]
    pub control_offset: Option<String>,
    /// Bytes of event JSON acknowledged by the server, for `relay status`.
    #[serde(default)]
    pub bytes_sent: u64,
}

/// Marks a ledger keeps: its size stays small whatever the history.
const MAX_MARKS: usize = 32;

impl Ledger {
    /// Notes that the stream's offset after the event `lsn` is `offset`. When the marks are
    /// full, the one whose loss leaves the smallest gap for its age goes (never the first or
    /// the last): the gaps grow with the distance from the newest, so a fork anywhere finds
    /// a mark within a fraction of its distance from the end.
    pub fn mark(&mut self, lsn: u64, offset: &str) {
        if self.marks.last().is_some_and(|(l, _)| *l >= lsn) {
            return;
        }
        if self.marks.len() >= MAX_MARKS {
            let newest = lsn;
            // Cost of dropping mark i: the gap it leaves over its age, compared as fractions.
            let cost = |i: usize| {
                let gap = (self.marks[i + 1].0 - self.marks[i - 1].0) as u128;
                let age = (newest - self.marks[i].0 + 1) as u128;
                (gap, age)
            };
            let cheapest = (1..self.marks.len() - 1).min_by(|&a, &b| {
                let ((ga, aa), (gb, ab)) = (cost(a), cost(b));
                (ga * ab).cmp(&(gb * aa))
            });
            if let Some(i) = cheapest {
                self.marks.remove(i);
            }
        }
        self.marks.push((lsn, offset.to_string()));
    }

    /// The last mark at or before `lsn`.
    pub fn mark_at_or_before(&self, lsn: u64) -> Option<&(u64, String)> {
        self.marks.iter().rev().find(|(l, _)| *l <= lsn)
    }

    /// Forgets the batches cut but not acknowledged: what follows numbers its batches afresh
    /// (a new epoch, a new stream), and whatever of them reached the server was found first.
    pub fn drop_batches(&mut self) {
        self.inflight = None;
        self.queued.clear();
    }

    /// The batch in flight is acknowledged: the first queued one, if it follows it, is next.
    /// Queued batches that do not follow were never sent (each waits for the one before
    /// it), so they are dropped and cut again.
    pub fn promote_queued(&mut self, acked: &Inflight) {
        if self.queued.first().is_some_and(|q| q.seq == acked.seq + 1) {
            self.inflight = Some(self.queued.remove(0));
        } else {
            self.drop_batches();
        }
    }

    /// This ledger if it describes `target`, else a fresh one for it.
    pub fn for_target(self, target: &str) -> Ledger {
        if self.target == target {
            self
        } else {
            Ledger {
                target: target.to_string(),
                ..Ledger::default()
            }
        }
    }
}

/// Where the ledgers live: `<data>/relay/`.
#[derive(Debug, Clone)]
pub struct LedgerDir {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
}

impl LedgerDir {
    pub fn open(vfs: Arc<dyn Vfs>, data_dir: &Path) -> io::Result<LedgerDir> {
        let dir = data_dir.join("relay");
        if !vfs.exists(&dir) {
            vfs.create_dir_all(&dir)?;
            vfs.sync_dir(data_dir)?;
        }
        Ok(LedgerDir { vfs, dir })
    }

    /// The control stream's saved position, if any.
    pub fn load_control(&self, session: &str) -> Option<Vec<u8>> {
        self.vfs.read(&self.control_path(session)).ok()
    }

    /// Saves the control stream's position, atomically and durably.
    pub fn save_control(&self, session: &str, bytes: &[u8]) -> io::Result<()> {
        self.vfs.write_atomic(&self.control_path(session), bytes)
    }

    /// Where the control stream of `session` was read up to.
    fn control_path(&self, session: &str) -> PathBuf {
        self.dir.join(format!("{session}.control.json"))
    }

    fn path(&self, session: &str) -> PathBuf {
        self.dir.join(format!("{session}.json"))
    }

    /// The session's ledger; a fresh one when none was written yet. A ledger that cannot be
    /// parsed is an error, never silently reset (that could send everything twice).
    pub fn load(&self, session: &str) -> io::Result<Ledger> {
        match self.vfs.read(&self.path(session)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("relay ledger {}: {e}", self.path(session).display()),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Ledger::default()),
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, session: &str, ledger: &Ledger) -> io::Result<()> {
        let bytes = serde_json::to_vec(ledger).map_err(io::Error::other)?;
        self.vfs.write_atomic(&self.path(session), &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_stay_few_and_recent_ones_dense() {
        let mut l = Ledger::default();
        for lsn in 1..=100_000 {
            l.mark(lsn, &format!("o{lsn}"));
        }
        assert!(l.marks.len() <= MAX_MARKS, "{}", l.marks.len());
        let lsns: Vec<u64> = l.marks.iter().map(|(l, _)| *l).collect();
        assert!(lsns.windows(2).all(|w| w[0] < w[1]), "{lsns:?}");
        assert_eq!(lsns[0], 1, "the first stays: {lsns:?}");
        assert_eq!(
            &lsns[lsns.len() - 3..],
            [99_998, 99_999, 100_000],
            "{lsns:?}"
        );
        assert_eq!(l.mark_at_or_before(100_000).unwrap().1, "o100000");
        // A fork d events from the end finds a mark at most about d further back.
        for back in [10u64, 1_000, 30_000] {
            let k = 100_000 - back;
            let (at, _) = l.mark_at_or_before(k).unwrap();
            assert!(k - at <= back, "fork at {k}: mark at {at}: {lsns:?}");
        }
        assert!(l.mark_at_or_before(0).is_none());
        l.mark(7, "late");
        assert_eq!(l.marks.last().unwrap().0, 100_000, "marks only go forward");
    }

    #[test]
    fn only_the_batch_right_after_the_acknowledged_one_goes_next() {
        let batch = |seq, first_lsn, last_lsn| Inflight {
            seq,
            first_lsn,
            last_lsn,
            close: false,
        };
        let mut l = Ledger {
            inflight: Some(batch(3, 1, 10)),
            queued: vec![batch(4, 11, 20), batch(5, 21, 30)],
            ..Ledger::default()
        };
        l.promote_queued(&batch(3, 1, 10));
        assert_eq!(l.inflight, Some(batch(4, 11, 20)));
        assert_eq!(l.queued, [batch(5, 21, 30)]);
        // A queued batch that does not follow was never sent: it is cut again.
        l.queued = vec![batch(9, 21, 30)];
        l.promote_queued(&batch(4, 11, 20));
        assert_eq!((l.inflight, l.queued.len()), (None, 0));
        // A ledger from before `queued` existed reads as having none.
        let old: Ledger = serde_json::from_str(
            r#"{"epoch":1,"next_seq":2,"acked_lsn":5,"inflight":{"seq":2,"first_lsn":6,"last_lsn":9}}"#,
        )
        .unwrap();
        assert_eq!((old.inflight, old.queued.len()), (Some(batch(2, 6, 9)), 0));
    }

    #[test]
    fn a_ledger_survives_a_round_trip_and_a_missing_one_is_fresh() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = LedgerDir::open(crate::vfs::os(), tmp.path()).unwrap();
        assert_eq!(dir.load("s1").unwrap(), Ledger::default());
        let l = Ledger {
            target: "http://h/v1/stream/m".into(),
            created: true,
            epoch: 2,
            next_seq: 7,
            acked_lsn: 40,
            remote_offset: Some("0000_123".into()),
            inflight: Some(Inflight {
                seq: 7,
                first_lsn: 41,
                last_lsn: 50,
                close: false,
            }),
            queued: vec![Inflight {
                seq: 8,
                first_lsn: 51,
                last_lsn: 60,
                close: false,
            }],
            closed: false,
            closed_for_archive: false,
            stream: Some("s1~1".into()),
            stream_start: 12,
            marks: vec![(30, "0000_100".into()), (40, "0000_123".into())],
            remote_fork: true,
            control_offset: None,
            bytes_sent: 999,
        };
        dir.save("s1", &l).unwrap();
        assert_eq!(dir.load("s1").unwrap(), l);
        std::fs::write(tmp.path().join("relay/s2.json"), b"{garbage").unwrap();
        assert!(
            dir.load("s2").is_err(),
            "a damaged ledger is never reset silently"
        );
    }
}
