//! Property tests of the RESP parser: random bytes, valid frames, truncated
//! frames and frames split at random points. The parser returns the request
//! that was encoded, `Incomplete`, or an error: never a panic, never a loop.

use super::resp::{parse, parse_resume, request, Limits, Parsed, Progress};
use proptest::prelude::*;

const LIM: Limits = Limits {
    max_request_bytes: 1 << 20,
    max_args: 1000,
    name: "--max-request-bytes",
};

/// Parses `buf` to its end: each step must consume bytes or stop.
fn parse_all(buf: &[u8], lim: &Limits) -> (Vec<Vec<Vec<u8>>>, Result<usize, String>) {
    let mut reqs = Vec::new();
    let mut at = 0;
    // Each step consumes at least one byte, so this bound is never reached
    // unless the parser stalls.
    for _ in 0..=buf.len() {
        match parse(&buf[at..], lim) {
            Ok(Parsed::Request(args, n)) => {
                assert!(
                    n > 0 && at + n <= buf.len(),
                    "consumed {n} at {at} of {}",
                    buf.len()
                );
                reqs.push(args);
                at += n;
            }
            Ok(Parsed::Skip(n)) => {
                assert!(n > 0 && at + n <= buf.len());
                at += n;
            }
            Ok(Parsed::Multi(_)) => unreachable!("parse() copies a multibulk request's arguments"),
            Ok(Parsed::Incomplete) => return (reqs, Ok(at)),
            Err(e) => return (reqs, Err(e.0)),
        }
    }
    panic!("parser made no progress");
}

fn args() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse_all(&bytes, &LIM);
        let tight = Limits { max_request_bytes: 64, max_args: 3, name: "the test limit" };
        let _ = parse_all(&bytes, &tight);
    }

    #[test]
    fn random_bytes_after_a_star_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut b = b"*".to_vec();
        b.extend_from_slice(&bytes);
        let _ = parse_all(&b, &LIM);
    }

    #[test]
    fn encode_then_parse_round_trips(reqs in prop::collection::vec(args(), 1..5)) {
        let mut wire = Vec::new();
        for r in &reqs {
            wire.extend_from_slice(&request(r));
        }
        let (got, rest) = parse_all(&wire, &LIM);
        prop_assert_eq!(got, reqs);
        prop_assert_eq!(rest, Ok(wire.len()));
    }

    #[test]
    fn truncated_frames_are_incomplete(r in args(), cut in any::<prop::sample::Index>()) {
        let wire = request(&r);
        let cut = cut.index(wire.len());
        prop_assert_eq!(parse(&wire[..cut], &LIM), Ok(Parsed::Incomplete));
    }

    #[test]
    fn frames_split_anywhere_parse_the_same(
        reqs in prop::collection::vec(args(), 1..5),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        // Feed the bytes in pieces, as reads deliver them, parsing after each.
        let mut wire = Vec::new();
        for r in &reqs {
            wire.extend_from_slice(&request(r));
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(wire.len())).collect();
        cuts.push(wire.len());
        cuts.sort_unstable();
        let (mut buf, mut got, mut fed) = (Vec::new(), Vec::new(), 0);
        for c in cuts {
            buf.extend_from_slice(&wire[fed..c]);
            fed = c;
            let (reqs, rest) = parse_all(&buf, &LIM);
            got.extend(reqs);
            let used = rest.map_err(TestCaseError::fail)?;
            buf.drain(..used);
        }
        prop_assert_eq!(got, reqs);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn corrupted_frames_never_panic(r in args(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut wire = request(&r);
        let i = at.index(wire.len());
        wire[i] = byte;
        let (got, _) = parse_all(&wire, &LIM);
        // A corrupted frame parses as at most a few requests, each bounded.
        prop_assert!(got.len() <= wire.len());
    }

    #[test]
    fn inline_words_round_trip(words in prop::collection::vec("[a-zA-Z0-9:_-]{1,12}", 1..6)) {
        let line = format!("{}\r\n", words.join(" "));
        let want: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
        prop_assert_eq!(parse(line.as_bytes(), &LIM), Ok(Parsed::Request(want, line.len())));
    }

    /// Bytes arriving in pieces, parsed as the event loop does (resuming
    /// where the last parse stopped, the consumed prefix dropped): the same
    /// requests, or the same first error, as parsing everything at once.
    #[test]
    fn resumed_parses_match_whole_parses(
        reqs in prop::collection::vec(args(), 1..6),
        junk in prop::collection::vec(any::<u8>(), 0..20),
        cuts in prop::collection::vec(0usize..400, 0..30),
        inline in any::<bool>(),
    ) {
        let mut wire = Vec::new();
        for r in &reqs {
            wire.extend_from_slice(&request(r));
        }
        if inline {
            wire.extend_from_slice(b"PING hello\r\n");
        }
        wire.extend_from_slice(&junk);
        let (want, want_end) = parse_all(&wire, &LIM);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(wire.len())).collect();
        cuts.push(wire.len());
        cuts.sort_unstable();
        let (mut input, mut fed, mut got) = (Vec::new(), 0usize, Vec::new());
        let mut p = Progress::default();
        let mut failed = None;
        'feed: for c in cuts {
            input.extend_from_slice(&wire[fed..c]);
            fed = c;
            loop {
                match parse_resume(&input, &LIM, &mut p) {
                    Ok(Parsed::Request(a, n)) => {
                        got.push(a);
                        input.drain(..n);
                    }
                    Ok(Parsed::Multi(n)) => {
                        got.push(p.args(&input).map(<[u8]>::to_vec).collect());
                        input.drain(..n);
                    }
                    Ok(Parsed::Skip(n)) => {
                        input.drain(..n);
                    }
                    Ok(Parsed::Incomplete) => break,
                    Err(e) => {
                        failed = Some(e.0);
                        break 'feed;
                    }
                }
            }
        }
        prop_assert_eq!(got, want);
        match want_end {
            Ok(_) => prop_assert_eq!(failed, None),
            Err(e) => prop_assert_eq!(failed, Some(e)),
        }
    }

}

#[test]
fn limits_are_checked_before_the_body_arrives() {
    let lim = Limits {
        max_request_bytes: 100,
        max_args: 4,
        name: "--max-request-bytes",
    };
    // The header alone announces too much: an error now, not Incomplete.
    assert!(parse(b"*3\r\n$3\r\nSET\r\n$1000\r\n", &lim).is_err());
    assert!(parse(b"*5\r\n", &lim).is_err());
    assert!(parse(b"*4000000000\r\n", &LIM).is_err());
    assert!(parse(b"*1\r\n$99999999999999999999999\r\n", &LIM).is_err());
    assert!(parse(b"*1\r\n$-1\r\n", &LIM).is_err());
    assert!(parse(b"*1\r\n$3\r\nabcXY", &LIM).is_err());
    assert!(parse(b"*1\r\n+OK\r\n", &LIM).is_err());
    assert_eq!(parse(b"*0\r\n", &LIM), Ok(Parsed::Skip(4)));
    assert_eq!(parse(b"*-1\r\n", &LIM), Ok(Parsed::Skip(5)));
    // As Redis: any count below 0 carries no request (a review's `*-2`
    // closed the connection).
    assert_eq!(parse(b"*-2\r\n", &LIM), Ok(Parsed::Skip(5)));
    assert_eq!(parse(b"\r\n", &LIM), Ok(Parsed::Skip(2)));
    // An endless inline line or header is refused once it passes its bound.
    assert!(parse(&vec![b'a'; super::resp::MAX_INLINE + 1], &LIM).is_err());
    assert_eq!(parse(&vec![b'a'; 1000], &LIM), Ok(Parsed::Incomplete));
    assert!(parse(b"*1111111111111111111111111", &LIM).is_err());
}

#[test]
fn inline_quotes_as_redis() {
    let p = |s: &str| parse(s.as_bytes(), &LIM);
    let req = |w: &[&str], line: &str| {
        Ok(Parsed::Request(
            w.iter().map(|s| s.as_bytes().to_vec()).collect(),
            line.len(),
        ))
    };
    let line = "SADD \"a b\" 'c d'\n";
    assert_eq!(p(line), req(&["SADD", "a b", "c d"], line));
    let line = "PING \"\\x41\\t\"\r\n";
    assert_eq!(p(line), req(&["PING", "A\t"], line));
    assert!(p("PING \"abc\n").is_err());
    assert!(p("PING \"abc\"def\n").is_err());
    // A quote inside a word opens quoting there, as in Redis (a review's
    // `ECHO ab"c d"` was split in two).
    let line = "ECHO ab\"c d\" x'y z'\n";
    assert_eq!(p(line), req(&["ECHO", "abc d", "xy z"], line));
    assert!(p("ECHO ab\"c d\n").is_err());
}

/// A request's arguments are read in place until the next parse, and a
/// connection that once sent many arguments does not keep room for them:
/// a 200-argument SADD, then a PING, through one `Progress`.
#[test]
fn arguments_read_in_place_and_the_room_of_many_given_back() {
    let big: Vec<Vec<u8>> = std::iter::once(b"SADD".to_vec())
        .chain((0..200).map(|i| format!("m{i}").into_bytes()))
        .collect();
    let mut wire = request(&big);
    let first = wire.len();
    wire.extend_from_slice(&request(&[b"PING".to_vec()]));
    let mut p = Progress::default();
    let Ok(Parsed::Multi(n)) = parse_resume(&wire, &LIM, &mut p) else {
        panic!("the SADD parses whole");
    };
    assert_eq!(n, first);
    let got: Vec<Vec<u8>> = p.args(&wire).map(<[u8]>::to_vec).collect();
    assert_eq!(got, big);
    let Ok(Parsed::Multi(m)) = parse_resume(&wire[n..], &LIM, &mut p) else {
        panic!("the PING parses whole");
    };
    assert_eq!(m, wire.len() - n);
    assert_eq!(p.args(&wire[n..]).collect::<Vec<_>>(), [b"PING"]);
    assert!(p.spans_room() <= 64, "kept room for {}", p.spans_room());
}
