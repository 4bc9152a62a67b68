//! The CSV of an upload, parsed as it arrives: a blocking reader over the chunks the handler
//! forwards, its header checked first, its rows sent on in batches to be stored.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix_web::web::Bytes;
use domain::bulk::csv::too_many_columns;
use domain::bulk::MAX_COLUMNS;

/// Rows per stored batch while uploading.
const UPLOAD_BATCH: usize = 2_000;

/// The longest header row read, in bytes: [`MAX_COLUMNS`] columns of long names fit. A longer
/// one is refused while it arrives, before it is split into columns.
const MAX_HEADER_BYTES: usize = 256 * 1024;
/// The CSV reader's buffer: what it may have read past the header row when that ends.
const READ_AHEAD: usize = 8 * 1024;

/// Reads what the upload handler forwards, as a blocking `Read` for the CSV parser. It stops
/// (an error) once `cut` is set, when the request ended before the parse did, and while the
/// header is read, past [`MAX_HEADER_BYTES`].
struct ChunkReader {
    chunks: tokio::sync::mpsc::Receiver<Bytes>,
    current: Bytes,
    cut: Arc<AtomicBool>,
    /// Bytes read so far, while the header is read; `None` after it.
    header_read: Option<usize>,
    header_too_long: bool,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.cut.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the upload was cut short"));
        }
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(next) => self.current = next,
                // The sender also goes when the request is dropped: not the file's end then.
                None if self.cut.load(Ordering::Relaxed) => {
                    return Err(std::io::Error::other("the upload was cut short"))
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        if let Some(read) = self.header_read.as_mut() {
            *read += n;
            if *read > MAX_HEADER_BYTES + READ_AHEAD {
                self.header_too_long = true;
                return Err(std::io::Error::other("the header row is too long"));
            }
        }
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

/// The refusal of a header row over [`MAX_HEADER_BYTES`] or [`MAX_COLUMNS`].
fn header_too_long() -> String {
    format!(
        "invalid header: it is longer than {} KiB; a header has at most {MAX_COLUMNS} columns",
        MAX_HEADER_BYTES / 1024
    )
}

/// Parses the stream: checks the header, sends rows in batches. Returns (header, rows).
pub(super) fn parse(
    chunks: tokio::sync::mpsc::Receiver<Bytes>,
    rows: tokio::sync::mpsc::Sender<Vec<(u64, Vec<String>)>>,
    cut: Arc<AtomicBool>,
) -> Result<(Vec<String>, u64), String> {
    let mut reader = csv::ReaderBuilder::new()
        .buffer_capacity(READ_AHEAD)
        .has_headers(true)
        .flexible(true)
        .from_reader(ChunkReader {
            chunks,
            current: Bytes::new(),
            cut: cut.clone(),
            header_read: Some(0),
            header_too_long: false,
        });
    let header: Vec<String> = match reader.byte_headers() {
        Ok(cells) if cells.len() > MAX_COLUMNS => {
            return Err(format!("invalid header: {}", too_many_columns(cells.len())))
        }
        Ok(cells) => cells
            .iter()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect(),
        Err(e) => {
            if reader.get_ref().header_too_long {
                return Err(header_too_long());
            }
            return Err(format!("the header cannot be read: {e}"));
        }
    };
    reader.get_mut().header_read = None;
    if header.iter().all(String::is_empty) {
        return Err("the file is empty: it needs a header row".into());
    }
    domain::bulk::CsvHeader::parse(&header).map_err(|e| format!("invalid header: {e}"))?;
    let mut batch = Vec::with_capacity(UPLOAD_BATCH);
    let mut count = 0u64;
    let mut record = csv::ByteRecord::new();
    loop {
        if cut.load(Ordering::Relaxed) {
            return Err("the upload was cut short".into());
        }
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                count += 1;
                let cells = record
                    .iter()
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect();
                batch.push((count, cells));
                if batch.len() == UPLOAD_BATCH
                    && rows.blocking_send(std::mem::take(&mut batch)).is_err()
                {
                    return Err("the rows could not be stored".into());
                }
            }
            Err(e) => return Err(format!("row {}: {e}", count + 1)),
        }
    }
    if !batch.is_empty() && rows.blocking_send(batch).is_err() {
        return Err("the rows could not be stored".into());
    }
    Ok((header, count))
}
