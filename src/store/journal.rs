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
//! A torn or corrupt record ends the replay: it can only be the tail that was being
//! written when the process died, which no caller was told was durable.

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

/// The batches at the start of `bytes`, up to the first torn or corrupt record; and
/// whether the bytes ended cleanly.
pub fn decode(bytes: &[u8]) -> (Vec<Vec<Op>>, bool) {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(record) = decode_one(&mut rest) else {
            return (out, false);
        };
        out.push(record);
    }
    (out, true)
}

fn decode_one(rest: &mut &[u8]) -> Option<Vec<Op>> {
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(rest.get(4..HEADER)?.try_into().ok()?);
    let payload = rest.get(HEADER..HEADER + len)?;
    if crc32fast::hash(payload) != crc {
        return None;
    }
    *rest = &rest[HEADER + len..];
    let mut p = payload;
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
        if s <= seq {
            fs::remove_file(path).map_err(io)?;
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
        let (records, clean) = decode(&buf);
        assert!(clean);
        assert_eq!(records, vec![ops.clone(), ops[..1].to_vec()]);
        // The second record cut short, then corrupted: only the first survives.
        let (records, clean) = decode(&buf[..buf.len() - 3]);
        assert!(!clean);
        assert_eq!(records.len(), 1);
        let mut bad = buf.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let (records, clean) = decode(&bad);
        assert!(!clean);
        assert_eq!(records.len(), 1);
    }
}
