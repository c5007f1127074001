//! The store's write-ahead journal: what makes a commit durable, with one `write` and one
//! `fdatasync` per group of commits on the writer thread, instead of a sled flush.
//!
//! Every batch is one record. After a crash, the records of the files left are applied
//! again, in order (see `sled_store.rs`).
//!
//! Files are `<dir>/<sequence>.log`; the writer starts a new one every few seconds, and
//! the files before it are deleted once a sled flush has made their batches durable.
//!
//! A record: payload length (u32 LE), CRC-32 of the payload (u32 LE), payload. Payload:
//! each write: kind (1 put, 2 delete), tree (index into
//! [`Tree::ALL`]), key length (u32 LE), key, and for a put value length (u32 LE), value.
//! A record that runs past the end of the last file, or the last record of it failing its
//! check, is the tail that was being written when the process died, which no caller was
//! told was durable: the replay ends there. A whole record that fails its check with more
//! records after it is damage (the disk, or a hand): it is skipped, the records after it
//! are applied, and the file is kept aside (see `sled_store.rs`).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Op, StoreError, Tree};

const PUT: u8 = 1;
const DELETE: u8 = 2;
const HEADER: usize = 8;

/// Append the record of batch `ops` to `buf`.
pub fn encode(buf: &mut Vec<u8>, ops: &[Op]) {
    let start = buf.len();
    buf.extend_from_slice(&[0; HEADER]);
    for op in ops {
        match op {
            Op::Put(t, k, v) => {
                buf.extend_from_slice(&[PUT, tree_index(*t)]);
                put_bytes(buf, k);
                put_bytes(buf, v);
            }
            Op::Delete(t, k) => {
                buf.extend_from_slice(&[DELETE, tree_index(*t)]);
                put_bytes(buf, k);
            }
        }
    }
    let payload = &buf[start + HEADER..];
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let crc = crc32fast::hash(payload);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
}

fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(bytes);
}

fn tree_index(t: Tree) -> u8 {
    Tree::ALL.iter().position(|x| *x == t).unwrap_or(0) as u8
}

/// What [`decode`] read from a file.
#[derive(Debug, Default, PartialEq)]
pub struct Decoded {
    /// The batches, in order.
    pub records: Vec<Vec<Op>>,
    /// The bytes end in a record cut short, or in one that fails its check: a write the
    /// process died in (if this is the last file).
    pub torn: bool,
    /// Whole records followed by others that failed their check, skipped.
    pub damaged: usize,
}

/// Why a record did not decode.
enum Bad {
    /// It runs past the end of the bytes.
    Short,
    /// It is whole (`len` bytes of payload) but fails its check.
    Damaged { len: usize },
}

/// The batches in `bytes` (see [`Decoded`]).
pub fn decode(bytes: &[u8]) -> Decoded {
    let mut out = Decoded::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        match decode_one(&mut rest) {
            Ok(record) => out.records.push(record),
            Err(Bad::Damaged { len }) if HEADER + len < rest.len() => {
                out.damaged += 1;
                rest = &rest[HEADER + len..];
            }
            // Cut short, or the last record failing its check: a crash's torn tail, unless
            // a whole record follows further on (a damaged length pointed past it).
            Err(_) => match resync(rest) {
                Some(at) => {
                    out.damaged += 1;
                    rest = &rest[at..];
                }
                None => {
                    out.torn = true;
                    break;
                }
            },
        }
    }
    out
}

/// The first offset after the start of `bytes` where a whole, non-empty record checks out.
fn resync(bytes: &[u8]) -> Option<usize> {
    (1..bytes.len()).find(|&at| {
        let mut probe = &bytes[at..];
        let whole = probe.len() > HEADER && probe[..4] != [0; 4];
        whole && decode_one(&mut probe).is_ok()
    })
}

fn decode_one(rest: &mut &[u8]) -> Result<Vec<Op>, Bad> {
    let header = rest.get(..HEADER).ok_or(Bad::Short)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let payload = rest.get(HEADER..HEADER + len).ok_or(Bad::Short)?;
    let damaged = Bad::Damaged { len };
    if crc32fast::hash(payload) != crc {
        return Err(damaged);
    }
    let ops = parse(payload).ok_or(damaged)?;
    *rest = &rest[HEADER + len..];
    Ok(ops)
}

/// The writes of a record's payload.
fn parse(mut p: &[u8]) -> Option<Vec<Op>> {
    let mut ops = Vec::new();
    while !p.is_empty() {
        let head = take(&mut p, 2)?;
        let tree = *Tree::ALL.get(head[1] as usize)?;
        let key = take_bytes(&mut p)?;
        ops.push(match head[0] {
            PUT => Op::Put(tree, key, take_bytes(&mut p)?),
            DELETE => Op::Delete(tree, key),
            _ => return None,
        });
    }
    Some(ops)
}

fn take<'a>(p: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let head = p.get(..n)?;
    *p = &p[n..];
    Some(head)
}

fn take_bytes(p: &mut &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_le_bytes(take(p, 4)?.try_into().ok()?) as usize;
    take(p, len).map(<[u8]>::to_vec)
}

fn io(e: std::io::Error) -> StoreError {
    StoreError::Backend(format!("journal: {e}"))
}

/// The journal files of `dir`, oldest first, by sequence number.
pub fn files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let seq = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(seq) = seq {
            out.push((seq, path));
        }
    }
    out.sort();
    Ok(out)
}

/// The file being appended to.
pub struct Active {
    dir: PathBuf,
    file: File,
    pub seq: u64,
    /// Bytes written to it.
    pub written: u64,
}

impl Active {
    /// Create `<dir>/<seq>.log` and make its name durable.
    pub fn create(dir: &Path, seq: u64) -> Result<Self, StoreError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path_of(dir, seq))
            .map_err(io)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            file,
            seq,
            written: 0,
        })
    }

    /// Append `bytes` and wait until they are on disk. On failure the file is cut back,
    /// so a part written is not followed by later records (a replay stops at a torn one).
    pub fn append(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        let done = self
            .file
            .write_all(bytes)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = done {
            let _ = self.file.set_len(self.written);
            return Err(io(e));
        }
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Continue in the next file; returns the sequence number of the one closed.
    pub fn rotate(&mut self) -> Result<u64, StoreError> {
        let next = Self::create(&self.dir, self.seq + 1)?;
        Ok(std::mem::replace(self, next).seq)
    }
}

pub fn path_of(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.log"))
}

/// Delete the files up to and including `seq` (their batches are durable in sled).
pub fn remove_through(dir: &Path, seq: u64) -> Result<(), StoreError> {
    for (s, path) in files(dir)? {
        // Gone already: the checkpointer and a reopen of the store may both delete them.
        if s <= seq
            && let Err(e) = fs::remove_file(path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return Err(io(e));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_torn_tail_ends_the_replay() {
        let ops = vec![
            Op::Put(Tree::Inbox, b"k1".to_vec(), b"v1".to_vec()),
            Op::Delete(Tree::Seen, b"k2".to_vec()),
            Op::Put(Tree::Meta, Vec::new(), Vec::new()),
        ];
        let mut buf = Vec::new();
        encode(&mut buf, &ops);
        encode(&mut buf, &ops[..1]);
        let d = decode(&buf);
        assert!(!d.torn && d.damaged == 0);
        assert_eq!(d.records, vec![ops.clone(), ops[..1].to_vec()]);
        // The second record cut short, or its end unwritten: only the first survives.
        let d = decode(&buf[..buf.len() - 3]);
        assert!(d.torn && d.damaged == 0);
        assert_eq!(d.records.len(), 1);
        let mut bad = buf.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let d = decode(&bad);
        assert!(d.torn && d.damaged == 0);
        assert_eq!(d.records.len(), 1);
    }

    #[test]
    fn a_damaged_record_in_the_middle_is_skipped_and_the_ones_after_it_read() {
        let put = |k: &str| Op::Put(Tree::Inbox, k.into(), b"v".to_vec());
        let mut buf = Vec::new();
        encode(&mut buf, &[put("a")]);
        let second = buf.len();
        encode(&mut buf, &[put("b")]);
        encode(&mut buf, &[put("c")]);
        buf[second + HEADER + 3] ^= 0x01;
        let d = decode(&buf);
        assert_eq!(d.records, vec![vec![put("a")], vec![put("c")]]);
        assert_eq!((d.torn, d.damaged), (false, 1));
        // A damaged length (pointing past the end) with a whole record after it: damage too.
        buf[second + HEADER + 3] ^= 0x01;
        buf[second + 3] ^= 0x40;
        let d = decode(&buf);
        assert_eq!(d.records, vec![vec![put("a")], vec![put("c")]]);
        assert_eq!((d.torn, d.damaged), (false, 1));
        // A torn tail of zeros after whole records is still a torn tail.
        let mut torn = Vec::new();
        encode(&mut torn, &[put("a")]);
        torn.extend_from_slice(&[0, 0, 0, 9, 1, 2]);
        let d = decode(&torn);
        assert_eq!((d.records.len(), d.torn, d.damaged), (1, true, 0));
    }
}
