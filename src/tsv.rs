//! TSV lines of tags with PostgreSQL COPY-style backslash escapes.

use crate::format::Tag;

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
}
