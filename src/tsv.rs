//! TSV lines of tags with PostgreSQL COPY-style backslash escapes.

use crate::format::tag::MAX_TAG_BYTES;
use crate::format::Tag;
use std::io::{self, BufRead};

/// The UTF-8 byte order mark; [`LineReader`] drops it from the start of its input.
pub const BOM: &str = "\u{feff}";

/// Longest TSV line any tag can need, its `\r\n` included: the three strings
/// hold at most 156 bytes, each escaped to at most 2 characters, plus 2 tabs.
pub const MAX_LINE_BYTES: usize = 2 * MAX_TAG_BYTES + 2 + 2;

/// Escapes a field: backslash, tab, newline and carriage return become `\\`, `\t`, `\n`, `\r`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// Undoes [`escape`]; names the bad sequence on error.
pub fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('\\') => out.push('\\'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(o) => return Err(format!("unknown escape \\{o} (known: \\t \\n \\r \\\\)")),
            None => return Err("line ends in a lone backslash".into()),
        }
    }
    Ok(out)
}

/// Formats a tag as one TSV line (without the newline).
pub fn format_tag(t: &Tag) -> String {
    format!(
        "{}\t{}\t{}",
        escape(&t.object),
        escape(&t.relationship),
        escape(&t.subject)
    )
}

/// Parses one TSV line (without its newline) into a tag.
pub fn parse_line(line: &str) -> Result<Tag, String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() {
        return Err(
            "blank line (every line must be a tag: object<TAB>relationship<TAB>subject)".into(),
        );
    }
    let fields: Vec<&str> = line.split('\t').collect();
    if fields.len() != 3 {
        return Err(format!(
            "expected 3 tab-separated fields (object, relationship, subject), found {}",
            fields.len()
        ));
    }
    Ok(Tag::new(
        unescape(fields[0])?,
        unescape(fields[1])?,
        unescape(fields[2])?,
    ))
}

/// Why [`LineReader::next_line`] stopped.
#[derive(Debug)]
pub enum LineError {
    /// Reading the input failed.
    Io(io::Error),
    /// The line passed [`MAX_LINE_BYTES`]; the rest of it was not read.
    TooLong,
}

/// Reads TSV lines with bounded memory: drops a [`BOM`] at the start of the
/// input and refuses a line as soon as it passes [`MAX_LINE_BYTES`].
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    line_no: u64,
    bytes: u64,
}

impl<R: BufRead> LineReader<R> {
    /// Reads lines from `inner`.
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            buf: Vec::with_capacity(MAX_LINE_BYTES + BOM.len() + 1),
            line_no: 0,
            bytes: 0,
        }
    }

    /// The next line without its `\n` (a `\r` before it stays, for
    /// [`parse_line`]), or `None` at the end of the input. After an error the
    /// reader is mid-line and should not be read further.
    pub fn next_line(&mut self) -> Result<Option<&[u8]>, LineError> {
        let first = self.line_no == 0;
        let limit = MAX_LINE_BYTES + if first { BOM.len() } else { 0 };
        self.buf.clear();
        loop {
            let avail = match self.inner.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.line_no += 1;
                    return Err(LineError::Io(e));
                }
            };
            if avail.is_empty() {
                break;
            }
            let (take, done) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            if self.buf.len() + take > limit {
                self.line_no += 1;
                return Err(LineError::TooLong);
            }
            self.buf.extend_from_slice(&avail[..take]);
            self.inner.consume(take);
            self.bytes += take as u64;
            if done {
                break;
            }
        }
        if self.buf.is_empty() {
            return Ok(None);
        }
        self.line_no += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        }
        let start = if first && self.buf.starts_with(BOM.as_bytes()) {
            BOM.len()
        } else {
            0
        };
        Ok(Some(&self.buf[start..]))
    }

    /// Number of the line last returned (or refused, or being read when reading failed), from 1.
    pub fn line_no(&self) -> u64 {
        self.line_no
    }

    /// Bytes of input consumed so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_awkward_strings() {
        let t = Tag::new("a\tb\\c", "rel\nx", "日本\r語\\t");
        let line = format_tag(&t);
        assert!(!line.contains('\n'));
        assert_eq!(line.matches('\t').count(), 2);
        assert_eq!(parse_line(&line).expect("parses"), t);
    }

    #[test]
    fn rejects_malformed() {
        assert!(parse_line("a\tb").is_err());
        assert!(parse_line("a\tb\tc\td").is_err());
        assert!(parse_line("a\\x\tb\tc").is_err());
        assert!(parse_line("a\tb\tc\\").is_err());
        assert_eq!(
            parse_line("a\tb\tc\r").expect("crlf"),
            Tag::new("a", "b", "c")
        );
    }

    fn lines(input: &[u8]) -> Vec<Result<Vec<u8>, String>> {
        let mut r = LineReader::new(std::io::BufReader::with_capacity(7, input));
        let mut out = Vec::new();
        loop {
            match r.next_line() {
                Ok(Some(l)) => out.push(Ok(l.to_vec())),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(format!("{e:?} at {}", r.line_no())));
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn line_reader_bom_and_limits() {
        let ok = |s: &str| Ok(s.as_bytes().to_vec());
        assert_eq!(
            lines("\u{feff}a\tb\tc\r\nx\n\u{feff}y".as_bytes()),
            vec![ok("a\tb\tc\r"), ok("x"), ok("\u{feff}y")]
        );
        assert_eq!(lines(b""), vec![]);
        assert_eq!(lines(b"\n\n"), vec![ok(""), ok("")]);
        let longest = "x".repeat(MAX_LINE_BYTES - 1) + "\n";
        assert_eq!(lines(longest.as_bytes()).len(), 1);
        let bom_longest = format!("{BOM}{longest}");
        assert_eq!(lines(bom_longest.as_bytes()).len(), 1);
        let over = format!("a\n{}", "x".repeat(MAX_LINE_BYTES + 1));
        assert_eq!(
            lines(over.as_bytes()),
            vec![ok("a"), Err("TooLong at 2".into())]
        );
        assert_eq!(MAX_LINE_BYTES, 316);
    }
}
