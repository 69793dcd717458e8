//! Standard output for a command's results: buffered, and a write error
//! (a full disk, `> /dev/full`) is an error of the command, reported when
//! it finishes. A reader that went away (`| head`) is not an error.

use std::fmt;
use std::io::{self, BufWriter, StdoutLock, Write};

/// Prints one line to an [`Out`]; evaluates to false once nothing more can be written.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        $out.line(format_args!($($arg)*))
    };
}
pub(crate) use say;

/// Buffered stdout that remembers its first write error.
pub struct Out {
    w: BufWriter<StdoutLock<'static>>,
    state: State,
}

/// What became of the writes so far.
enum State {
    Open,
    /// The reader closed the pipe: stop writing, but it is not a failure.
    Gone,
    Failed(io::Error),
}

impl Out {
    /// Wraps the process's stdout.
    pub fn new() -> Self {
        Out {
            w: BufWriter::new(io::stdout().lock()),
            state: State::Open,
        }
    }

    /// Writes one line; false once the reader went away or a write failed.
    pub fn line(&mut self, args: fmt::Arguments<'_>) -> bool {
        if !matches!(self.state, State::Open) {
            return false;
        }
        let r = self
            .w
            .write_fmt(args)
            .and_then(|()| self.w.write_all(b"\n"));
        self.note(r)
    }

    /// Writes `s` and a newline (no formatting); as [`Out::line`].
    pub fn text(&mut self, s: &str) -> bool {
        if !matches!(self.state, State::Open) {
            return false;
        }
        let r = self
            .w
            .write_all(s.as_bytes())
            .and_then(|()| self.w.write_all(b"\n"));
        self.note(r)
    }

    fn note(&mut self, r: io::Result<()>) -> bool {
        match r {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.state = State::Gone;
                false
            }
            Err(e) => {
                self.state = State::Failed(e);
                false
            }
        }
    }

    /// Flushes; the first write error, if any, as "writing to stdout: ...".
    pub fn finish(mut self) -> Result<(), String> {
        if matches!(self.state, State::Open) {
            let r = self.w.flush();
            self.note(r);
        }
        match std::mem::replace(&mut self.state, State::Gone) {
            State::Failed(e) => {
                // Drop what could not be written rather than retry it when dropped.
                let _ = self.w.into_parts();
                Err(format!("writing to stdout: {e}"))
            }
            _ => Ok(()),
        }
    }
}
