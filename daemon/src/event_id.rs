//! Event ids as ULIDs: the ids a log gives the events it names itself, and reading the
//! millisecond of any id.
//!
//! An event that arrives without an id gets one at its commit: the commit's millisecond, then
//! 80 bits that are its session's seed (a hash of the session's name) plus its LSN. So an id is
//! unique within a session (one LSN each) and across sessions (their seeds are 80 random-looking
//! bits apart), increases within a session as a monotonic ULID does, and is known again from
//! the session, the LSN and the millisecond alone: a stored line whose id is this one leaves it
//! out and keeps the millisecond (see [`crate::event_json::CompactFields`]).

use sha2::{Digest, Sha256};

/// The largest millisecond a ULID holds (48 bits).
pub const MAX_MS: u64 = (1 << 48) - 1;
const RANDOM_MASK: u128 = (1 << 80) - 1;

/// The seed of the ids a session's log names, from the session id as the content of a JSON
/// string (a writer leaves an id out only for sessions whose name needs no escaping, where
/// that content is the name itself). SHA-256, fixed here, so every version of dstream
/// derives the same ids, and names that differ in one letter get seeds far apart.
pub fn seed(session_json: &[u8]) -> u128 {
    let digest = Sha256::digest(session_json);
    let mut low = [0u8; 16];
    low[6..].copy_from_slice(&digest[..10]);
    u128::from_be_bytes(low)
}

/// [`seed`], remembered for the last name this thread asked for: a fork's copied prefix says
/// its parent's name on every line, and a read of it would hash that name line after line.
pub fn seed_of_line(session_json: &[u8]) -> u128 {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(Vec<u8>, u128)>> = const {
            std::cell::RefCell::new(None)
        };
    }
    LAST.with_borrow_mut(|last| match last {
        Some((name, seed_of_name)) if name.as_slice() == session_json => *seed_of_name,
        _ => {
            let seed_of_name = seed(session_json);
            *last = Some((session_json.to_vec(), seed_of_name));
            seed_of_name
        }
    })
}

/// The id the log of the session with `seed` gives its event `lsn`, committed at `ms`, as the
/// 128 bits of a ULID.
pub fn derived(seed: u128, lsn: u64, ms: u64) -> u128 {
    let random = seed.wrapping_add(u128::from(lsn)) & RANDOM_MASK;
    (u128::from(ms & MAX_MS) << 80) | random
}

/// A ULID's 26-digit text (Crockford base 32, upper case), as `ulid::Ulid::to_string` writes it.
pub fn encode(ulid: u128) -> [u8; 26] {
    const DIGITS: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    // 26 digits of 5 bits hold 130: the first digit carries the top 3 bits only.
    std::array::from_fn(|i| DIGITS[((ulid >> (125 - 5 * i)) & 0x1f) as usize])
}

/// [`encode`] as a `String`.
pub fn text(ulid: u128) -> String {
    encode(ulid).iter().map(|&d| char::from(d)).collect()
}

/// The millisecond a ULID encodes, for exactly the ids `ulid::Ulid::from_string` takes (26
/// Crockford base-32 digits, either case): the writer and every reader must agree on which
/// lines left their timestamp out. It runs on every event read, so it decodes the 10 digits
/// of the time and only checks the other 16, where a full parse built the whole 128 bits.
pub fn ulid_ms(id: &[u8]) -> Option<u64> {
    let id: &[u8; 26] = id.try_into().ok()?;
    let mut ms = 0u64;
    for &c in &id[..10] {
        ms = ms << 5 | crockford(c)? as u64;
    }
    id[10..].iter().try_for_each(|&c| crockford(c).map(drop))?;
    // 10 digits hold 50 bits; a ULID's time is the low 48 of them (the top 2 overflow 128).
    Some(ms & MAX_MS)
}

/// The value of a Crockford base-32 digit (no I, L, O or U), either case.
fn crockford(c: u8) -> Option<u8> {
    match CROCKFORD[c as usize] {
        NOT_A_DIGIT => None,
        v => Some(v),
    }
}

const NOT_A_DIGIT: u8 = 0xff;
/// Each byte's digit value, built from the alphabet at compile time.
const CROCKFORD: [u8; 256] = {
    const DIGITS: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut table = [NOT_A_DIGIT; 256];
    let mut v = 0;
    while v < 32 {
        let d = DIGITS[v];
        table[d as usize] = v as u8;
        table[d.to_ascii_lowercase() as usize] = v as u8;
        v += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_id_is_the_ulid_of_its_millisecond_and_reads_back() {
        let seed = seed(b"bench-7");
        for (lsn, ms) in [(1, 0), (42, 1_795_807_198_596), (u64::MAX, MAX_MS)] {
            let id = derived(seed, lsn, ms);
            let ulid = ulid::Ulid(id);
            assert_eq!(ulid.timestamp_ms(), ms);
            let text = encode(id);
            assert_eq!(std::str::from_utf8(&text).unwrap(), ulid.to_string());
            assert_eq!(ulid_ms(&text), Some(ms));
        }
    }

    #[test]
    fn derived_ids_increase_within_a_session_and_differ_across_sessions() {
        let ms = 1_795_807_198_596;
        let names: Vec<String> = (0..64)
            .map(|i| format!("bench-{i}"))
            .chain(["a".into(), "b".into(), "".into()])
            .collect();
        let seeds: Vec<u128> = names.iter().map(|n| seed(n.as_bytes())).collect();
        // One letter apart, the seeds are still far apart: no two sessions with fewer than
        // 2^40 events each can meet in the same millisecond.
        for (i, a) in seeds.iter().enumerate() {
            for b in &seeds[i + 1..] {
                let apart = a.wrapping_sub(*b) & RANDOM_MASK;
                let apart = apart.min(b.wrapping_sub(*a) & RANDOM_MASK);
                assert!(apart > 1 << 40, "{a:x} {b:x}");
            }
        }
        let s = seeds[0];
        for lsn in 1..1000 {
            assert!(derived(s, lsn, ms) < derived(s, lsn + 1, ms));
            assert!(derived(s, lsn + 1, ms) < derived(s, lsn, ms + 1));
        }
        // The seed is fixed: a log written by one version names the same ids in the next.
        assert_eq!(
            std::str::from_utf8(&encode(derived(seed(b"s-1"), 7, 1_795_807_198_596))).unwrap(),
            ulid::Ulid(derived(seed(b"s-1"), 7, 1_795_807_198_596)).to_string()
        );
        assert_eq!(seed(b"s-1"), SEED_OF_S_1);
        // The remembered seed is the seed, whichever name came before.
        for name in ["p", "p", "", "f", "p", "", ""] {
            assert_eq!(
                seed_of_line(name.as_bytes()),
                seed(name.as_bytes()),
                "{name:?}"
            );
        }
    }

    /// `seed(b"s-1")` as this version computes it; a change here makes old lines' ids change.
    const SEED_OF_S_1: u128 = 0x6a84_0baf_5d8c_3ff2_4168;

    #[test]
    fn the_millisecond_of_an_id_is_the_ulid_crates_for_every_id_it_takes() {
        let theirs = |id: &str| ulid::Ulid::from_string(id).ok().map(|u| u.timestamp_ms());
        let mut ids: Vec<String> = (0..2000)
            .map(|i| {
                ulid::Ulid::from_parts(i * 7_919_993_611 % (1 << 48), i as u128 * 31).to_string()
            })
            .collect();
        ids.extend(ids.clone().iter().map(|i| i.to_lowercase()));
        ids.extend([
            "7ZZZZZZZZZZZZZZZZZZZZZZZZZ".into(),
            "ZZZZZZZZZZZZZZZZZZZZZZZZZZ".into(), // past 128 bits: the crate keeps the low bits
            "01M8FTM32VMAMSGQCNTB4JM7XI".into(), // I, L, O, U are not digits
            "01M8FTM32VMAMSGQCNTB4JM7XL".into(),
            "O1M8FTM32VMAMSGQCNTB4JM7XZ".into(),
            "01M8FTM32VMAMSGQCNTB4JM7XU".into(),
            "01M8FTM32VMAMSGQCNTB4JM7X".into(),
            "01M8FTM32VMAMSGQCNTB4JM7XZZ".into(),
            "01M8FTM32VMAMSGQCNTB4JM7X!".into(),
            "01m8ftm32vmamsgqcntb4jm7xz".into(),
            String::new(),
        ]);
        for id in &ids {
            assert_eq!(ulid_ms(id.as_bytes()), theirs(id), "{id}");
        }
        // Every byte in every place.
        let base = *b"01M8FTM32VMAMSGQCNTB4JM7XZ";
        for at in [0, 9, 10, 25] {
            for b in 0..=255u8 {
                let mut id = base;
                id[at] = b;
                let text = String::from_utf8_lossy(&id).into_owned();
                let want = std::str::from_utf8(&id).ok().and_then(theirs);
                assert_eq!(ulid_ms(&id), want, "{text:?}");
            }
        }
    }
}
