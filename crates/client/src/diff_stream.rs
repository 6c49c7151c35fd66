//! The export-diff stream: what changed in a volume between two snapshots
//! (or since its creation), in a self-checking format that `import-diff`
//! applies. Written down for operators in docs/operator-guide.md
//! ("Diff stream format"). All integers are little-endian.
//!
//! ```text
//! header  magic "PONTDIFF" (8 bytes), version u32 (1), image size u64,
//!         from-snapshot name (u16 length, bytes; length 0: a full diff),
//!         to-snapshot name (u16 length, bytes), crc32c u32 of the header
//! record  'D' u8, offset u64, length u64, data (length bytes), crc32c u32
//!         'Z' u8, offset u64, length u64, crc32c u32     (reads as zeros)
//!         each record's crc32c covers its bytes before it; records ascend
//!         by offset, never overlap, lie inside the image, and have lengths
//!         that are positive multiples of 4096 (data: at most 4 MiB)
//! end     'E' u8, records u64, data bytes u64, crc32c u32 of the whole
//!         stream before it; nothing may follow
//! ```
//!
//! A reader checks every record before handing it out, so nothing corrupt
//! is ever applied; a stream cut short or damaged later is reported with
//! how many records came before (see [`DiffStreamError`]).

use std::io::{self, Read, Write};

use pontoon_buf::AlignedBuf;
use pontoon_types::BLOCK_SIZE_U64;

/// The stream's first bytes.
pub const MAGIC: &[u8; 8] = b"PONTDIFF";
/// The format version written and read.
pub const VERSION: u32 = 1;
/// Most bytes one data record carries (bounds a reader's memory).
pub const MAX_DATA_RECORD: u64 = 4 << 20;
/// Longest snapshot name (a map name is far shorter).
const MAX_NAME: usize = 255;

const DATA: u8 = b'D';
const ZERO: u8 = b'Z';
const END: u8 = b'E';

/// Why a diff stream cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum DiffStreamError {
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Not a diff stream, or one of another version.
    #[error("not a Pontoon diff stream: {0}")]
    NotADiff(String),
    /// The stream ends early.
    #[error("the diff stream is truncated after {records} record(s)")]
    Truncated {
        /// Whole records read before it ended.
        records: u64,
    },
    /// A checksum or a field is wrong.
    #[error("the diff stream is corrupt after {records} record(s): {why}")]
    Corrupt {
        /// Whole records read before the bad one.
        records: u64,
        /// What is wrong.
        why: String,
    },
}

/// What a diff stream describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffHeader {
    /// The image's size at the to-snapshot, bytes.
    pub size: u64,
    /// The snapshot the diff starts from (`None`: a full diff, from an
    /// empty image).
    pub from: Option<String>,
    /// The snapshot the diff leads to.
    pub to: String,
}

/// One change.
#[derive(Debug)]
pub enum DiffRecord {
    /// `data` goes at `offset`.
    Data {
        /// Byte offset in the image.
        offset: u64,
        /// The bytes.
        data: AlignedBuf,
    },
    /// `len` bytes at `offset` read as zeros.
    Zero {
        /// Byte offset in the image.
        offset: u64,
        /// Bytes.
        len: u64,
    },
}

/// Totals of a whole stream, as its end record states them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiffTotals {
    /// Data and zero records.
    pub records: u64,
    /// Bytes of data carried.
    pub data_bytes: u64,
}

/// Writes a diff stream: [`DiffWriter::new`], records in ascending order,
/// then [`DiffWriter::finish`].
pub struct DiffWriter<W: Write> {
    out: W,
    crc: u32,
    next: u64,
    size: u64,
    totals: DiffTotals,
}

impl<W: Write> DiffWriter<W> {
    /// Starts a stream on `out` with `header`.
    pub fn new(out: W, header: &DiffHeader) -> Result<Self, DiffStreamError> {
        let mut h = Vec::with_capacity(64);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&header.size.to_le_bytes());
        for name in [header.from.as_deref().unwrap_or(""), header.to.as_str()] {
            if name.len() > MAX_NAME {
                return Err(DiffStreamError::NotADiff(format!(
                    "snapshot name of {} bytes",
                    name.len()
                )));
            }
            h.extend_from_slice(&(name.len() as u16).to_le_bytes());
            h.extend_from_slice(name.as_bytes());
        }
        let crc = crc32c::crc32c(&h);
        h.extend_from_slice(&crc.to_le_bytes());
        let mut w = Self {
            out,
            crc: 0,
            next: 0,
            size: header.size,
            totals: DiffTotals::default(),
        };
        w.put(&h)?;
        Ok(w)
    }

    fn put(&mut self, b: &[u8]) -> Result<(), DiffStreamError> {
        self.crc = crc32c::crc32c_append(self.crc, b);
        self.out.write_all(b)?;
        Ok(())
    }

    fn check(&mut self, offset: u64, len: u64) {
        assert!(
            offset >= self.next && len > 0 && offset + len <= self.size,
            "diff records ascend inside the image: {offset}+{len} after {} in {}",
            self.next,
            self.size
        );
        assert!(offset.is_multiple_of(BLOCK_SIZE_U64) && len.is_multiple_of(BLOCK_SIZE_U64));
        self.next = offset + len;
        self.totals.records += 1;
    }

    /// Records that `data` goes at `offset` (split into records of at most
    /// [`MAX_DATA_RECORD`]).
    pub fn data(&mut self, offset: u64, data: &[u8]) -> Result<(), DiffStreamError> {
        for (i, chunk) in data.chunks(MAX_DATA_RECORD as usize).enumerate() {
            let at = offset + i as u64 * MAX_DATA_RECORD;
            self.check(at, chunk.len() as u64);
            self.totals.data_bytes += chunk.len() as u64;
            let mut head = [0u8; 17];
            head[0] = DATA;
            head[1..9].copy_from_slice(&at.to_le_bytes());
            head[9..17].copy_from_slice(&(chunk.len() as u64).to_le_bytes());
            let crc = crc32c::crc32c_append(crc32c::crc32c(&head), chunk);
            self.put(&head)?;
            self.put(chunk)?;
            self.put(&crc.to_le_bytes())?;
        }
        Ok(())
    }

    /// Records that `len` bytes at `offset` read as zeros.
    pub fn zero(&mut self, offset: u64, len: u64) -> Result<(), DiffStreamError> {
        self.check(offset, len);
        let mut rec = [0u8; 21];
        rec[0] = ZERO;
        rec[1..9].copy_from_slice(&offset.to_le_bytes());
        rec[9..17].copy_from_slice(&len.to_le_bytes());
        let crc = crc32c::crc32c(&rec[..17]);
        rec[17..].copy_from_slice(&crc.to_le_bytes());
        self.put(&rec)
    }

    /// Writes the end record, flushes, and returns the output and totals.
    pub fn finish(mut self) -> Result<(W, DiffTotals), DiffStreamError> {
        let mut end = [0u8; 17];
        end[0] = END;
        end[1..9].copy_from_slice(&self.totals.records.to_le_bytes());
        end[9..17].copy_from_slice(&self.totals.data_bytes.to_le_bytes());
        self.put(&end)?;
        let crc = self.crc;
        self.out.write_all(&crc.to_le_bytes())?;
        self.out.flush()?;
        Ok((self.out, self.totals))
    }
}

/// Reads a diff stream, checking each record before returning it.
pub struct DiffReader<R: Read> {
    input: R,
    header: DiffHeader,
    crc: u32,
    next: u64,
    totals: DiffTotals,
    done: bool,
}

impl<R: Read> DiffReader<R> {
    /// Reads and checks the header.
    pub fn new(input: R) -> Result<Self, DiffStreamError> {
        let mut r = Self {
            input,
            header: DiffHeader {
                size: 0,
                from: None,
                to: String::new(),
            },
            crc: 0,
            next: 0,
            totals: DiffTotals::default(),
            done: false,
        };
        let mut h = Vec::with_capacity(64);
        let magic = r.take::<8>(&mut h)?;
        if &magic != MAGIC {
            return Err(DiffStreamError::NotADiff("bad magic".into()));
        }
        let version = u32::from_le_bytes(r.take(&mut h)?);
        if version != VERSION {
            return Err(DiffStreamError::NotADiff(format!(
                "format version {version} (this pontoon reads {VERSION})"
            )));
        }
        let size = u64::from_le_bytes(r.take(&mut h)?);
        let from = r.name(&mut h)?;
        let to = r.name(&mut h)?;
        let want = crc32c::crc32c(&h);
        let got = u32::from_le_bytes(r.take(&mut h)?);
        if got != want || to.is_empty() {
            return Err(r.corrupt("the header's checksum does not match"));
        }
        r.header = DiffHeader {
            size,
            from: (!from.is_empty()).then_some(from),
            to,
        };
        Ok(r)
    }

    /// The stream's header.
    pub fn header(&self) -> &DiffHeader {
        &self.header
    }

    fn corrupt(&self, why: impl Into<String>) -> DiffStreamError {
        DiffStreamError::Corrupt {
            records: self.totals.records,
            why: why.into(),
        }
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<(), DiffStreamError> {
        match self.input.read_exact(buf) {
            Ok(()) => {
                self.crc = crc32c::crc32c_append(self.crc, buf);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(DiffStreamError::Truncated {
                records: self.totals.records,
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// `N` bytes, also appended to `rec` (the bytes a checksum covers).
    fn take<const N: usize>(&mut self, rec: &mut Vec<u8>) -> Result<[u8; N], DiffStreamError> {
        let mut b = [0u8; N];
        self.fill(&mut b)?;
        rec.extend_from_slice(&b);
        Ok(b)
    }

    fn name(&mut self, h: &mut Vec<u8>) -> Result<String, DiffStreamError> {
        let n = u16::from_le_bytes(self.take(h)?) as usize;
        if n > MAX_NAME {
            return Err(self.corrupt(format!("a snapshot name of {n} bytes")));
        }
        let mut b = vec![0u8; n];
        self.fill(&mut b)?;
        h.extend_from_slice(&b);
        String::from_utf8(b).map_err(|_| self.corrupt("a snapshot name is not UTF-8"))
    }

    /// The next record, checked; `None` once the end record has been read
    /// and checked (and nothing follows it).
    pub fn next_record(&mut self) -> Result<Option<DiffRecord>, DiffStreamError> {
        if self.done {
            return Ok(None);
        }
        let mut rec = Vec::with_capacity(24);
        let crc_before = self.crc;
        let [kind] = self.take::<1>(&mut rec)?;
        match kind {
            DATA | ZERO => {
                let offset = u64::from_le_bytes(self.take(&mut rec)?);
                let len = u64::from_le_bytes(self.take(&mut rec)?);
                self.check_extent(kind, offset, len)?;
                let mut crc = crc32c::crc32c(&rec);
                let data = if kind == DATA {
                    let mut data = AlignedBuf::zeroed(len as usize);
                    self.fill(&mut data)?;
                    crc = crc32c::crc32c_append(crc, &data);
                    Some(data)
                } else {
                    None
                };
                let got = u32::from_le_bytes(self.take(&mut rec)?);
                if got != crc {
                    return Err(self.corrupt(format!(
                        "the checksum of the record at offset {offset} does not match"
                    )));
                }
                self.next = offset + len;
                self.totals.records += 1;
                Ok(Some(match data {
                    Some(data) => {
                        self.totals.data_bytes += len;
                        DiffRecord::Data { offset, data }
                    }
                    None => DiffRecord::Zero { offset, len },
                }))
            }
            END => {
                let records = u64::from_le_bytes(self.take(&mut rec)?);
                let data_bytes = u64::from_le_bytes(self.take(&mut rec)?);
                let want = self.crc;
                let mut b = [0u8; 4];
                self.fill(&mut b)?;
                if u32::from_le_bytes(b) != want {
                    return Err(self.corrupt("the stream's checksum does not match"));
                }
                let stated = DiffTotals {
                    records,
                    data_bytes,
                };
                if stated != self.totals {
                    return Err(self.corrupt(format!(
                        "the end record states {records} records and {data_bytes} data bytes"
                    )));
                }
                let mut extra = [0u8; 1];
                if self.input.read(&mut extra)? != 0 {
                    return Err(self.corrupt("bytes follow the end record"));
                }
                self.done = true;
                Ok(None)
            }
            other => {
                self.crc = crc_before;
                Err(self.corrupt(format!("unknown record kind {other:#04x}")))
            }
        }
    }

    fn check_extent(&self, kind: u8, offset: u64, len: u64) -> Result<(), DiffStreamError> {
        let aligned = offset.is_multiple_of(BLOCK_SIZE_U64) && len.is_multiple_of(BLOCK_SIZE_U64);
        let inside = offset
            .checked_add(len)
            .is_some_and(|e| e <= self.header.size);
        if !aligned || len == 0 || !inside || offset < self.next {
            return Err(self.corrupt(format!(
                "a record at {offset}+{len} is unaligned, empty, out of order or outside the {}-byte image",
                self.header.size
            )));
        }
        if kind == DATA && len > MAX_DATA_RECORD {
            return Err(self.corrupt(format!("a data record of {len} bytes")));
        }
        Ok(())
    }

    /// The totals read so far.
    pub fn totals(&self) -> DiffTotals {
        self.totals
    }
}

/// Reads a whole stream, checking every record and the end, without
/// keeping any data: what an import checks before it applies a file.
pub fn verify<R: Read>(input: R) -> Result<(DiffHeader, DiffTotals), DiffStreamError> {
    let mut r = DiffReader::new(input)?;
    while r.next_record()?.is_some() {}
    Ok((r.header.clone(), r.totals))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let h = DiffHeader {
            size: 64 << 20,
            from: Some("a".into()),
            to: "b".into(),
        };
        let mut w = DiffWriter::new(Vec::new(), &h).unwrap();
        w.zero(0, 8192).unwrap();
        w.data(1 << 20, &vec![7u8; 6 << 20]).unwrap();
        w.zero(32 << 20, 4096).unwrap();
        let (out, totals) = w.finish().unwrap();
        assert_eq!(
            totals,
            DiffTotals {
                records: 4,
                data_bytes: 6 << 20
            }
        );
        out
    }

    #[test]
    fn a_stream_reads_back_as_written() {
        let s = sample();
        let mut r = DiffReader::new(&s[..]).unwrap();
        assert_eq!(r.header().from.as_deref(), Some("a"));
        assert_eq!(r.header().to, "b");
        let mut seen = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            seen.push(match rec {
                DiffRecord::Data { offset, data } => {
                    assert!(data.iter().all(|b| *b == 7));
                    (offset, data.len() as u64, true)
                }
                DiffRecord::Zero { offset, len } => (offset, len, false),
            });
        }
        assert_eq!(
            seen,
            vec![
                (0, 8192, false),
                (1 << 20, 4 << 20, true),
                (5 << 20, 2 << 20, true),
                (32 << 20, 4096, false)
            ]
        );
        assert_eq!(verify(&s[..]).unwrap().1.records, 4);
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let h = DiffHeader {
            size: 1 << 20,
            from: None,
            to: "s".into(),
        };
        let mut w = DiffWriter::new(Vec::new(), &h).unwrap();
        w.data(0, &[1u8; 4096]).unwrap();
        w.zero(8192, 4096).unwrap();
        let (s, _) = w.finish().unwrap();
        for cut in 0..s.len() {
            assert!(verify(&s[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..s.len() {
            let mut bad = s.clone();
            bad[i] ^= 0x10;
            assert!(verify(&bad[..]).is_err(), "flipped byte {i}");
        }
        let mut longer = s.clone();
        longer.push(0);
        assert!(verify(&longer[..]).is_err());
        assert!(matches!(
            verify(&s[..s.len() - 30]),
            Err(DiffStreamError::Truncated { records: 1 })
        ));
    }
}
