//! One stored line: a JSON object whose last field is a CRC32C of the bytes before it.
//!
//! ```text
//! {"lsn":7,"id":"01J…","type":"user.input",…,"payload":{…},"crc":"1a2b3c4d"}\n
//! └──────────────────── covered by the crc ──────────────────┘
//! ```
//! `jq` still reads every line, and a flipped bit anywhere in it is caught.
//! A line may leave out `session_id`, `stream_id`, `timestamp` and an `id` the log named itself
//! (in whose place it says `"ts":<ms>`) where they say nothing its log does not
//! ([`crate::event_json::CompactFields`]); readers get them back.

/// `,"crc":"` + 8 hex digits + `"}`.
pub const CRC_TRAILER_LEN: usize = 18;
const CRC_OPEN: &[u8] = b",\"crc\":\"";
const CRC_CLOSE: &[u8] = b"\"}";
const LSN_PREFIX: &[u8] = b"{\"lsn\":";

/// Why a line is not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// Too short, or the crc trailer is not where it must be.
    Malformed,
    /// The trailer is there but the checksum does not match the bytes.
    ChecksumMismatch,
    /// The line does not start with `{"lsn":<number>,`.
    NoLsn,
}

/// Turns a serialized JSON object (ending in `}`) into a stored line, trailer and `\n`
/// included, appended to `out`.
pub fn seal(object: &[u8], out: &mut Vec<u8>) {
    debug_assert!(object.len() > 2 && object.ends_with(b"}"));
    let body = &object[..object.len() - 1];
    let crc = crc32c::crc32c(body);
    out.reserve(body.len() + CRC_TRAILER_LEN + 1);
    out.extend_from_slice(body);
    out.extend_from_slice(CRC_OPEN);
    out.extend_from_slice(&hex(crc));
    out.extend_from_slice(CRC_CLOSE);
    out.push(b'\n');
}

/// `value` as the 8 lowercase hex digits a trailer holds.
fn hex(value: u32) -> [u8; 8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    std::array::from_fn(|i| HEX[((value >> (28 - 4 * i)) & 0xf) as usize])
}

fn parse_hex(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |acc, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        Some(acc << 4 | v as u32)
    })
}

/// Checks a line (without its `\n`) and returns its LSN and the event as JSON without the crc
/// field, as a `(body, lsn)` pair: the event is `body` followed by `}`.
pub fn open(line: &[u8]) -> Result<(u64, &[u8]), RecordError> {
    if line.len() < LSN_PREFIX.len() + CRC_TRAILER_LEN + 2 {
        return Err(RecordError::Malformed);
    }
    let body_len = line.len() - CRC_TRAILER_LEN;
    let (body, trailer) = line.split_at(body_len);
    if !trailer.starts_with(CRC_OPEN) || !trailer.ends_with(CRC_CLOSE) {
        return Err(RecordError::Malformed);
    }
    // The digits are compared as text: each checksum has exactly one spelling (8 lowercase
    // digits), and parsing them branch by branch cost a restart more than the checksum did.
    let digits = &trailer[CRC_OPEN.len()..CRC_OPEN.len() + 8];
    if digits != hex(crc32c::crc32c(body)) {
        return Err(match parse_hex(digits) {
            Some(_) => RecordError::ChecksumMismatch,
            None => RecordError::Malformed,
        });
    }
    Ok((lsn_of(body).ok_or(RecordError::NoLsn)?, body))
}

/// Reads the LSN from the fixed prefix `{"lsn":<digits>,` without parsing the rest.
pub fn lsn_of(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(LSN_PREFIX)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 || rest.get(digits) != Some(&b',') {
        return None;
    }
    // At most 19 digits: below u64::MAX whatever they are.
    Some(
        rest[..digits]
            .iter()
            .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_lines_open_and_stay_valid_json() {
        let mut out = Vec::new();
        seal(br#"{"lsn":42,"type":"x","payload":{"a":1}}"#, &mut out);
        assert!(out.ends_with(b"\"}\n"));
        let line = &out[..out.len() - 1];
        let v: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert_eq!(v["crc"].as_str().unwrap().len(), 8);
        let (lsn, body) = open(line).unwrap();
        assert_eq!(lsn, 42);
        assert_eq!(body, br#"{"lsn":42,"type":"x","payload":{"a":1}"#);
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        let mut out = Vec::new();
        seal(
            br#"{"lsn":1,"type":"user.input","payload":"hello"}"#,
            &mut out,
        );
        let line = out[..out.len() - 1].to_vec();
        for i in 0..line.len() {
            for bit in 0..8 {
                let mut bad = line.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    open(&bad).is_err(),
                    "flip of bit {bit} at byte {i} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn a_trailer_that_is_not_lowercase_hex_is_malformed_and_a_wrong_one_a_mismatch() {
        let mut out = Vec::new();
        seal(br#"{"lsn":3,"type":"x"}"#, &mut out);
        let line = out[..out.len() - 1].to_vec();
        let at = line.len() - CRC_TRAILER_LEN + CRC_OPEN.len();
        let digits = std::str::from_utf8(&line[at..at + 8]).unwrap().to_string();
        let with = |d: &str| [&line[..at], d.as_bytes(), &line[at + 8..]].concat();
        assert_eq!(
            parse_hex(digits.as_bytes()),
            Some(crc32c::crc32c(&line[..line.len() - CRC_TRAILER_LEN]))
        );
        assert_eq!(
            open(&with(&digits.to_uppercase())).err(),
            (digits != digits.to_uppercase()).then_some(RecordError::Malformed)
        );
        assert_eq!(open(&with("zzzzzzzz")).err(), Some(RecordError::Malformed));
        let other = format!("{:08x}", u32::from_str_radix(&digits, 16).unwrap() ^ 1);
        assert_eq!(
            open(&with(&other)).err(),
            Some(RecordError::ChecksumMismatch)
        );
    }

    #[test]
    fn lsn_prefix_is_strict() {
        assert_eq!(lsn_of(b"{\"lsn\":12,\"x\":1}"), Some(12));
        assert_eq!(lsn_of(b"{\"lsn\":,"), None);
        assert_eq!(lsn_of(b"{\"lsn\":99999999999999999999,"), None);
        assert_eq!(
            lsn_of(b"{\"lsn\":9999999999999999999,"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(lsn_of(b"{\"lsn\":007,"), Some(7));
        assert_eq!(lsn_of(b"{\"id\":1,"), None);
    }
}
