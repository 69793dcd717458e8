//! TSV lines of tags with PostgreSQL COPY-style backslash escapes.

use crate::format::long::MAX_STRING_BYTES;
use crate::format::Tag;
use std::io::{self, BufRead};

/// The UTF-8 byte order mark; [`LineReader`] drops it from the start of its input.
pub const BOM: &str = "\u{feff}";

/// Longest TSV line any tag can need, its `\r\n` included: three strings
/// of at most 65,536 bytes each, each byte escaped to at most 2
/// characters, plus 2 tabs.
pub const MAX_LINE_BYTES: usize = 2 * 3 * MAX_STRING_BYTES + 2 + 2;

/// Escapes a field: backslash, tab, newline and carriage return become `\\`, `\t`, `\n`, `\r`.
pub fn escape(s: &str) -> String {
    escaped(s).into_owned()
}

/// [`escape`], borrowing the field when it has nothing to escape (most do).
pub fn escaped(s: &str) -> std::borrow::Cow<'_, str> {
    if !s
        .bytes()
        .any(|b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r'))
    {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The escapes [`unescape`] knows, for its error messages.
const KNOWN: &str = "\\b \\f \\n \\r \\t \\v \\\\, octal \\NNN, hex \\xHH";

/// Undoes [`escape`], and reads every escape of PostgreSQL's COPY text
/// format that can stand for text: `\b \f \n \r \t \v \\`, one to three
/// octal digits and `\x` with one or two hex digits (a byte each; the
/// bytes must make UTF-8). Names the bad sequence on error: `\N` (COPY's
/// NULL) and a backslash before any other character are refused.
pub fn unescape(s: &str) -> Result<String, String> {
    if !s.contains('\\') {
        return Ok(s.to_owned());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    // Up to `max` digits of `radix` from `i` on, as one byte (PostgreSQL
    // keeps the low eight bits of an octal value).
    let digits = |i: &mut usize, radix: u32, max: usize| -> Option<u8> {
        let mut v: u32 = 0;
        let mut n = 0;
        while n < max {
            let Some(d) = b.get(*i).and_then(|&c| char::from(c).to_digit(radix)) else {
                break;
            };
            v = v * radix + d;
            *i += 1;
            n += 1;
        }
        (n > 0).then_some((v & 0xFF) as u8)
    };
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        i += 1;
        let Some(&e) = b.get(i) else {
            return Err(format!(
                "field ends in a lone backslash (write \\\\ for a backslash; known escapes: {KNOWN})"
            ));
        };
        i += 1;
        out.push(match e {
            b'\\' => b'\\',
            b't' => b'\t',
            b'n' => b'\n',
            b'r' => b'\r',
            b'b' => 0x08,
            b'f' => 0x0C,
            b'v' => 0x0B,
            b'0'..=b'7' => {
                i -= 1;
                digits(&mut i, 8, 3).unwrap_or(0)
            }
            b'x' => digits(&mut i, 16, 2)
                .ok_or_else(|| "\\x needs one or two hex digits".to_string())?,
            b'N' => return Err("\\N (NULL in PostgreSQL COPY) is not text a tag can hold".into()),
            _ => {
                let c = s[i - 1..].chars().next().unwrap_or('?');
                return Err(format!("unknown escape \\{c} (known: {KNOWN})"));
            }
        });
    }
    String::from_utf8(out).map_err(|_| "escaped bytes do not make valid UTF-8".to_string())
}

/// Formats a tag as one TSV line (without the newline).
pub fn format_tag(t: &Tag) -> String {
    format!(
        "{}\t{}\t{}",
        escaped(&t.object),
        escaped(&t.relationship),
        escaped(&t.subject)
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
    let field = |i: usize, name: &str| unescape(fields[i]).map_err(|e| format!("{name}: {e}"));
    Ok(Tag::new(
        field(0, "object")?,
        field(1, "relationship")?,
        field(2, "subject")?,
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
            buf: Vec::with_capacity(4096),
            line_no: 0,
            bytes: 0,
        }
    }

    /// The next line without its `\n` (a `\r` before it stays, for
    /// [`parse_line`]), or `None` at the end of the input. After an error the
    /// reader is mid-line and should not be read further.
    pub fn next_line(&mut self) -> Result<Option<&[u8]>, LineError> {
        let first = self.line_no == 0;
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
            // A byte order mark opening the input is not part of the line.
            // (Its bytes may arrive over several reads: look at both.)
            let mut head = [0u8; 3];
            let seen = self.buf.iter().chain(avail).take(3);
            let n = head.iter_mut().zip(seen).map(|(d, s)| *d = *s).count();
            let bom = first && n == 3 && head == *BOM.as_bytes();
            let limit = MAX_LINE_BYTES + if bom { BOM.len() } else { 0 };
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
        // An input of nothing but a byte order mark (some tools write one
        // into an empty export) is an empty input, not a blank line.
        if self.buf.is_empty() || (first && self.buf == BOM.as_bytes()) {
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

    /// After [`LineError::TooLong`], reads past the rest of that line
    /// without keeping it, so that the next call returns the line after.
    pub fn skip_rest(&mut self) -> io::Result<()> {
        loop {
            let avail = match self.inner.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                return Ok(());
            }
            let (take, done) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            self.inner.consume(take);
            self.bytes += take as u64;
            if done {
                return Ok(());
            }
        }
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
    fn skip_rest_resumes_at_the_line_after_a_too_long_one() {
        let long = "y".repeat(3 * MAX_LINE_BYTES);
        for tail in ["\nb\n", "\nb", "\n", ""] {
            let input = format!("a\n{long}{tail}");
            let mut r = LineReader::new(std::io::BufReader::with_capacity(7, input.as_bytes()));
            assert_eq!(r.next_line().ok().flatten(), Some(&b"a"[..]));
            assert!(matches!(r.next_line(), Err(LineError::TooLong)));
            r.skip_rest().expect("in memory");
            assert_eq!(
                r.bytes_read(),
                input.len().min(input.find('b').unwrap_or(input.len())) as u64
            );
            let next = r.next_line().ok().flatten().map(<[u8]>::to_vec);
            assert_eq!(
                next.as_deref(),
                tail.contains('b').then_some(&b"b"[..]),
                "{tail:?}"
            );
            assert_eq!(r.line_no(), 2 + u64::from(tail.contains('b')));
            assert!(matches!(r.next_line(), Ok(None)));
        }
    }

    #[test]
    fn line_reader_bom_and_limits() {
        let ok = |s: &str| Ok(s.as_bytes().to_vec());
        assert_eq!(
            lines("\u{feff}a\tb\tc\r\nx\n\u{feff}y".as_bytes()),
            vec![ok("a\tb\tc\r"), ok("x"), ok("\u{feff}y")]
        );
        // A BOM alone is an empty input; a BOM and a line end, a blank line.
        assert!(lines(BOM.as_bytes()).is_empty());
        assert_eq!(lines(format!("{BOM}\n").as_bytes()), vec![ok("")]);
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
        assert_eq!(MAX_LINE_BYTES, 393_220);
        // The allowance for a byte order mark is only for a line that has
        // one: 317 bytes without it are too long (they were accepted).
        let first_over = "x".repeat(MAX_LINE_BYTES) + "\n";
        assert_eq!(
            lines(first_over.as_bytes()),
            vec![Err("TooLong at 1".into())]
        );
        let with_bom = format!("{BOM}{}", "x".repeat(MAX_LINE_BYTES - 1));
        assert_eq!(lines(with_bom.as_bytes()).len(), 1);
        assert!(lines(with_bom.as_bytes())[0].is_ok());
        // The mark split over reads (a pipe may hand over one byte first).
        let mut r = LineReader::new(std::io::BufReader::new(std::io::Read::chain(
            &with_bom.as_bytes()[..1],
            &with_bom.as_bytes()[1..],
        )));
        assert!(r.next_line().is_ok(), "a mark split over two reads");
    }

    /// PostgreSQL COPY's text escapes are read (a dump made by `COPY TO`
    /// loads), each a byte; what COPY's NULL, an unknown escape or bytes
    /// that are not UTF-8 would need is refused with a reason.
    #[test]
    fn copy_escapes() {
        let ok = |s: &str| unescape(s).expect(s);
        assert_eq!(ok(r"a\bb\fc\vd"), "a\u{8}b\u{c}c\u{b}d");
        assert_eq!(ok(r"\t\n\r\\"), "\t\n\r\\");
        assert_eq!(ok(r"caf\303\251"), "café");
        assert_eq!(ok(r"caf\xc3\xA9"), "café");
        assert_eq!(ok(r"\0\11\1010"), "\0\tA0");
        assert_eq!(ok(r"\x41\x4g"), "A\u{4}g");
        assert_eq!(ok("plain ünïcode"), "plain ünïcode");
        for (bad, why) in [
            (r"\N", "NULL"),
            (r"a\q", "unknown escape \\q"),
            (r"a\é", "unknown escape \\é"),
            (r"\xg", "hex digits"),
            (r"\377", "UTF-8"),
            (r"\xc3", "UTF-8"),
            ("end\\", "lone backslash"),
        ] {
            let e = unescape(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
        // The field is named: a backslash before a tab ends the object.
        let e = parse_line("a\\\tr\tb").expect_err("lone");
        assert!(
            e.starts_with("object: field ends in a lone backslash"),
            "{e}"
        );
        // Whatever `escape` writes reads back.
        let s = "\u{8}\u{c}\u{b}\\\t\n\r x";
        assert_eq!(ok(&escape(s)), s);
        // Only a field with something to escape is copied; each of the
        // four characters alone is escaped.
        assert!(matches!(escaped("plain é"), std::borrow::Cow::Borrowed(_)));
        for (c, e) in [("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")] {
            assert_eq!(escaped(&format!("a{c}b")), format!("a{e}b"));
        }
    }
}
