//! RESP2: the request parser (multibulk frames and inline commands) and the
//! reply encoders.
//!
//! The parser is incremental in the simplest way: it is handed the unread
//! bytes and either returns one whole request and how many bytes it used,
//! says the bytes are an incomplete request, or names a protocol error. Sizes
//! are checked against [`Limits`] as soon as a header declares them, before
//! anything is allocated or waited for.

/// The most bytes an inline command line may take (as Redis).
pub const MAX_INLINE: usize = 64 * 1024;
/// Argument spans a connection keeps room for between requests.
const KEEP_SPANS: usize = 64;
/// Digits and sign a `*<count>` or `$<len>` header may hold before its CRLF.
const MAX_HEADER_DIGITS: usize = 20;

/// Bounds on one request.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes of one request, framing included.
    pub max_request_bytes: usize,
    /// Arguments of one request, the command name included.
    pub max_args: usize,
    /// The limit's name in error messages.
    pub name: &'static str,
}

/// What the front of the buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// One request (its arguments) and the bytes it used.
    Request(Vec<Vec<u8>>, usize),
    /// One multibulk request and the bytes it used; its arguments are
    /// [`Progress::args`] of the same buffer, until the next parse.
    Multi(usize),
    /// Bytes that carry no request (`*0`, `*-1`, a blank inline line).
    Skip(usize),
    /// Not a whole request yet: read more.
    Incomplete,
}

/// A malformed or oversized request; the connection is closed after saying so.
#[derive(Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

fn err<T>(m: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(m.into()))
}

/// Where the parse of an incomplete request at the front of a buffer
/// stopped, so that the next parse resumes there: a request that arrives
/// in many small pieces costs O(its size) to parse in all, not O(size²)
/// (a client dribbling a large request byte by byte must not make the
/// event loop rescan it at every byte).
#[derive(Debug, Default)]
pub struct Progress {
    /// A multibulk header was read: the argument count.
    count: Option<u64>,
    /// Where the next argument's header starts (multibulk), or how far the
    /// search for an inline line's end got.
    at: usize,
    /// The arguments read so far: (start, end) in the buffer.
    spans: Vec<(usize, usize)>,
    /// No progress is possible before the buffer holds this many bytes.
    need: usize,
}

impl Progress {
    /// The arguments of the request [`Parsed::Multi`] just returned, in
    /// `buf`, the buffer it was parsed from (no copies: a pipelined SADD
    /// allocated a vector per argument).
    pub fn args<'b>(&self, buf: &'b [u8]) -> impl Iterator<Item = &'b [u8]> + use<'b, '_> {
        self.spans
            .iter()
            .map(move |&(s, e)| buf.get(s..e).unwrap_or_default())
    }

    /// Argument spans this connection keeps room for (tests).
    #[cfg(test)]
    pub fn spans_room(&self) -> usize {
        self.spans.capacity()
    }

    /// Ready for the next request (its arguments stay readable until then).
    fn reset(&mut self) {
        self.count = None;
        self.at = 0;
        self.need = 0;
    }
}

/// Parses the request at the front of `buf` (from scratch: tests), a
/// multibulk one as [`Parsed::Request`] with its arguments copied.
#[cfg(test)]
pub fn parse(buf: &[u8], lim: &Limits) -> Result<Parsed, ProtocolError> {
    let mut p = Progress::default();
    Ok(match parse_resume(buf, lim, &mut p)? {
        Parsed::Multi(n) => Parsed::Request(p.args(buf).map(<[u8]>::to_vec).collect(), n),
        other => other,
    })
}

/// Parses the request at the front of `buf`, resuming from `p` (which must
/// come from parses of this same request's first bytes, or be fresh); `p`
/// is reset when the request is whole or refused.
pub fn parse_resume(buf: &[u8], lim: &Limits, p: &mut Progress) -> Result<Parsed, ProtocolError> {
    if buf.len() < p.need {
        return Ok(Parsed::Incomplete);
    }
    let r = match buf.first() {
        None => Ok(Parsed::Incomplete),
        Some(b'*') => multibulk(buf, lim, p),
        Some(_) => inline(buf, lim, p),
    };
    if !matches!(r, Ok(Parsed::Incomplete)) {
        p.reset();
    }
    r
}

/// The decimal number in a header line at `at` (after its type byte) and
/// where the next line starts; `None` when the line is not complete yet.
fn header(buf: &[u8], at: usize, what: &str) -> Result<Option<(i64, usize)>, ProtocolError> {
    let rest = &buf[at..];
    let Some(cr) = rest
        .iter()
        .take(MAX_HEADER_DIGITS + 1)
        .position(|&b| b == b'\r')
    else {
        if rest.len() > MAX_HEADER_DIGITS {
            return err(format!("Protocol error: too big {what} count string"));
        }
        return Ok(None);
    };
    match rest.get(cr + 1) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return err("Protocol error: expected '\\n' after '\\r'"),
    }
    let text = &rest[..cr];
    let (neg, digits) = match text.split_first() {
        Some((b'-', d)) => (true, d),
        _ => (false, text),
    };
    // As Redis's `string2ll`: no leading zero, no `-0` (one spelling each).
    let zero_led = digits.len() > 1 && digits[0] == b'0';
    if digits.is_empty()
        || digits.len() > 18
        || zero_led
        || (neg && digits == b"0")
        || !digits.iter().all(u8::is_ascii_digit)
    {
        return err(format!("Protocol error: invalid {what} length"));
    }
    let n = digits
        .iter()
        .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    Ok(Some((if neg { -n } else { n }, at + cr + 2)))
}

fn multibulk(buf: &[u8], lim: &Limits, p: &mut Progress) -> Result<Parsed, ProtocolError> {
    if let Some(count) = p.count {
        return bulks(buf, lim, p, count);
    }
    let Some((count, at)) = header(buf, 1, "multibulk")? else {
        p.need = buf.len() + 1;
        return Ok(Parsed::Incomplete);
    };
    // As Redis: a count of 0 or less carries no request (a review saw
    // `*-2` close the connection where Redis reads on).
    if count <= 0 {
        return Ok(Parsed::Skip(at));
    }
    // Each argument needs at least "$0\r\n\r\n": a count that cannot fit
    // is refused before any room is made for it.
    let count = count as u64;
    if count > lim.max_args as u64 {
        return err(format!(
            "Protocol error: {count} arguments, more than the {} a request may have",
            lim.max_args
        ));
    }
    if count.saturating_mul(6) > lim.max_request_bytes as u64 {
        return err(too_big(lim));
    }
    p.count = Some(count);
    p.at = at;
    // The room the last request's spans took is kept, unless a request of
    // many arguments made it large.
    if p.spans.capacity() > KEEP_SPANS {
        p.spans = Vec::new();
    }
    p.spans.clear();
    p.spans.reserve((count as usize).min(KEEP_SPANS));
    bulks(buf, lim, p, count)
}

/// The bulk strings of a multibulk request of `count` arguments, from
/// where `p` stopped.
fn bulks(buf: &[u8], lim: &Limits, p: &mut Progress, count: u64) -> Result<Parsed, ProtocolError> {
    while (p.spans.len() as u64) < count {
        let at = p.at;
        match buf.get(at) {
            None => {
                p.need = at + 1;
                return Ok(Parsed::Incomplete);
            }
            Some(b'$') => {}
            Some(&c) => {
                return err(format!(
                    "Protocol error: expected '$', got '{}'",
                    char::from(c).escape_default()
                ))
            }
        }
        let Some((len, start)) = header(buf, at + 1, "bulk")? else {
            p.need = buf.len() + 1;
            return Ok(Parsed::Incomplete);
        };
        if len < 0 {
            return err("Protocol error: invalid bulk length");
        }
        let end = start as u64 + len as u64;
        if end + 2 > lim.max_request_bytes as u64 {
            return err(too_big(lim));
        }
        let end = end as usize;
        if buf.len() < end + 2 {
            p.need = end + 2;
            return Ok(Parsed::Incomplete);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return err("Protocol error: bulk string not followed by CRLF");
        }
        p.spans.push((start, end));
        p.at = end + 2;
    }
    Ok(Parsed::Multi(p.at))
}

fn too_big(lim: &Limits) -> String {
    format!(
        "Protocol error: request larger than {} ({} bytes)",
        lim.name, lim.max_request_bytes
    )
}

/// A command typed by hand: words split as Redis does, with "double" (C
/// escapes, `\xHH`) and 'single' quotes.
fn inline(buf: &[u8], lim: &Limits, p: &mut Progress) -> Result<Parsed, ProtocolError> {
    let max = MAX_INLINE.min(lim.max_request_bytes);
    let from = p.at.min(buf.len());
    let found = buf[from..(max + 1).min(buf.len()).max(from)]
        .iter()
        .position(|&b| b == b'\n');
    let Some(nl) = found.map(|i| from + i) else {
        if buf.len() > max {
            return err("Protocol error: too big inline request");
        }
        p.at = buf.len();
        p.need = buf.len() + 1;
        return Ok(Parsed::Incomplete);
    };
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let args = split_words(line)?;
    if args.len() > lim.max_args {
        return err("Protocol error: too many arguments");
    }
    Ok(if args.is_empty() {
        Parsed::Skip(nl + 1)
    } else {
        Parsed::Request(args, nl + 1)
    })
}

fn split_words(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
    let unbalanced = || ProtocolError("Protocol error: unbalanced quotes in request".into());
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while line.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        if i >= line.len() {
            return Ok(args);
        }
        let mut word = Vec::new();
        // A quote opens quoting anywhere in a word, as Redis's
        // `sdssplitargs` (`ab"c d"` is the word `abc d`).
        let mut quote: Option<u8> = None;
        loop {
            let Some(&c) = line.get(i) else {
                if quote.is_some() {
                    return Err(unbalanced());
                }
                break;
            };
            i += 1;
            match quote {
                None if c.is_ascii_whitespace() => break,
                None if c == b'"' || c == b'\'' => quote = Some(c),
                None => word.push(c),
                Some(q) if c == q => {
                    // A closing quote must end the word.
                    if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                        return Err(unbalanced());
                    }
                    break;
                }
                Some(b'"') if c == b'\\' && i < line.len() => {
                    let e = line[i];
                    i += 1;
                    let hex = |b: u8| char::from(b).to_digit(16);
                    match (
                        e,
                        line.get(i).copied().and_then(hex),
                        line.get(i + 1).copied().and_then(hex),
                    ) {
                        (b'x', Some(h), Some(l)) => {
                            word.push((h * 16 + l) as u8);
                            i += 2;
                        }
                        (b'n', ..) => word.push(b'\n'),
                        (b'r', ..) => word.push(b'\r'),
                        (b't', ..) => word.push(b'\t'),
                        (b'b', ..) => word.push(8),
                        (b'a', ..) => word.push(7),
                        (other, ..) => word.push(other),
                    }
                }
                Some(b'\'') if c == b'\\' && line.get(i) == Some(&b'\'') => {
                    word.push(b'\'');
                    i += 1;
                }
                Some(_) => word.push(c),
            }
        }
        args.push(word);
    }
}

/// `+text`: `text` must hold no CR or LF (only fixed strings are passed).
pub fn simple(out: &mut Vec<u8>, text: &str) {
    out.push(b'+');
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `-message`: the message starts with its code (`ERR ...`); CR and LF in
/// it (from a client's bytes) become spaces.
pub fn error(out: &mut Vec<u8>, message: &str) {
    out.push(b'-');
    out.extend(
        message
            .bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// `:n`.
pub fn int(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `$len` and the bytes.
pub fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(bytes.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// `*n`: an array header; the `n` elements follow.
pub fn array(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The header of a set of `n` members: RESP3's `~n` after `HELLO 3`,
/// else an array's `*n`.
pub fn set(out: &mut Vec<u8>, n: usize, resp3: bool) {
    out.push(if resp3 { b'~' } else { b'*' });
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// RESP3's verbatim text (`=len`, `txt:` and the bytes), as Redis sends
/// INFO after `HELLO 3`.
pub fn verbatim(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'=');
    out.extend_from_slice((text.len() + 4).to_string().as_bytes());
    out.extend_from_slice(b"\r\ntxt:");
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

/// A null array (EXEC after a WATCHed key changed): RESP3's `_` after
/// `HELLO 3`, else RESP2's `*-1`.
pub fn null_array(out: &mut Vec<u8>, resp3: bool) {
    out.extend_from_slice(if resp3 { b"_\r\n" } else { b"*-1\r\n" });
}

/// A null: RESP3's `_` after `HELLO 3`, else RESP2's null bulk string.
pub fn null(out: &mut Vec<u8>, resp3: bool) {
    out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" });
}

/// A request as a client sends it: an array of bulk strings.
#[cfg(test)]
pub fn request(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    array(&mut out, args.len());
    for a in args {
        bulk(&mut out, a);
    }
    out
}
