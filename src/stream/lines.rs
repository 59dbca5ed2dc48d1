//! Lines out of the agent's byte stream: the splitter the main thread feeds every chunk to, and
//! the part of a chunk's lines the stdout reader thread parses while the main thread works.

use std::time::Instant;

use super::{MAX_SEGMENT, OutputHandler, Segment, Source};
use crate::agents::AgentEvent;

/// The share of a run's lines a [`LineParser`] parses on the reader thread (a little more than
/// half: the main thread parses the rest and then handles every line).
const READER_SHARE: (usize, usize) = (11, 20);

/// Parses one line of stdout into events (`None`: not an event) on the stdout reader thread,
/// while the main thread handles the chunks before.
pub(crate) type LineParser = Box<dyn Fn(&str) -> Option<Vec<AgentEvent>> + Send>;

/// What the reader thread parsed of a chunk's run of whole lines: its last lines' events.
///
/// The events' texts travel together in one string, and are made strings of their own again on
/// the main thread: memory is best freed by the thread that took it, and the main thread frees
/// the events once it has handled them.
pub(crate) struct ParsedLines {
    /// Where the run lies in its chunk.
    bytes: std::ops::Range<usize>,
    /// The first of the run's lines parsed (the ones before are left to the main thread).
    pub(crate) first: usize,
    /// Per line from `first` on: how many of `events` are its, or `None` (not an event).
    counts: std::vec::IntoIter<Option<usize>>,
    events: std::vec::IntoIter<AgentEvent>,
    /// The texts of the events that carry one, in order, and where each ends.
    texts: String,
    text_ends: std::vec::IntoIter<usize>,
    text_start: usize,
}

impl ParsedLines {
    /// The events of the next line parsed, or `None` when it is not an event.
    pub(crate) fn next_line(&mut self) -> Option<impl Iterator<Item = AgentEvent> + '_> {
        let count = self.counts.next()??;
        let Self {
            events,
            texts,
            text_ends,
            text_start,
            ..
        } = self;
        Some(events.take(count).map(move |mut event| {
            if let Some(text) = event.text_mut() {
                let end = text_ends.next().unwrap_or(*text_start);
                *text = texts.get(*text_start..end).unwrap_or_default().to_owned();
                *text_start = end;
            }
            event
        }))
    }
}

/// Parses the last lines of `chunk`'s run of whole lines: the lines the splitter gives at once,
/// from the chunk's start (or after the end of the line an earlier chunk began) to its last
/// line break. `at_line_start` says whether the chunk starts a line, and is set for the next.
pub(crate) fn parse_run(
    chunk: &[u8],
    at_line_start: &mut bool,
    parse: &LineParser,
) -> Option<ParsedLines> {
    let starts_line = std::mem::replace(at_line_start, chunk.last() == Some(&b'\n'));
    let start = if starts_line {
        0
    } else {
        memchr::memchr(b'\n', chunk)? + 1
    };
    let end = memchr::memrchr(b'\n', chunk)? + 1;
    let text = std::str::from_utf8(chunk.get(start..end)?).ok()?;
    let lines: Vec<&str> = lines_of(text).collect();
    let (share, of) = READER_SHARE;
    let first = lines.len() - lines.len() * share / of;
    let mut counts = Vec::with_capacity(lines.len() - first);
    let (mut events, mut texts, mut text_ends) = (Vec::new(), String::new(), Vec::new());
    for line in &lines[first..] {
        let parsed = parse(line);
        counts.push(parsed.as_ref().map(Vec::len));
        for mut event in parsed.into_iter().flatten() {
            if let Some(text) = event.text_mut() {
                texts.push_str(&std::mem::take(text));
                text_ends.push(texts.len());
            }
            events.push(event);
        }
    }
    Some(ParsedLines {
        bytes: start..end,
        first,
        counts: counts.into_iter(),
        events: events.into_iter(),
        texts,
        text_ends: text_ends.into_iter(),
        text_start: 0,
    })
}

/// Splits a byte stream into line segments of at most [`MAX_SEGMENT`] bytes.
pub(super) struct LineSplitter {
    source: Source,
    pending: Vec<u8>,
    at_line_start: bool,
}

impl LineSplitter {
    pub(super) fn new(source: Source) -> Self {
        Self {
            source,
            pending: Vec::new(),
            at_line_start: true,
        }
    }

    /// Takes a chunk, with what the reader thread parsed of its run of whole lines.
    pub(super) fn push(
        &mut self,
        chunk: &[u8],
        parsed: Option<ParsedLines>,
        received: Instant,
        handler: &mut dyn OutputHandler,
    ) {
        let mut data = chunk;
        if !self.at_line_start || !self.pending.is_empty() {
            // The end of a line begun in an earlier chunk.
            let Some(newline) = memchr::memchr(b'\n', data) else {
                self.keep(data, received, handler);
                return;
            };
            self.pending.extend_from_slice(&data[..newline]);
            let pending = std::mem::take(&mut self.pending);
            self.emit(&pending, true, received, handler);
            self.pending = pending;
            self.pending.clear();
            data = &data[newline + 1..];
        }
        if let Some(last) = memchr::memrchr(b'\n', data) {
            let (lines, rest) = data.split_at(last + 1);
            // One UTF-8 check for the chunk's whole lines (the usual case), else line by line.
            let start = chunk.len() - data.len();
            let parsed = parsed.filter(|parsed| parsed.bytes == (start..start + lines.len()));
            match std::str::from_utf8(lines) {
                Ok(text) => handler.on_lines(self.source, text, received, parsed),
                Err(_) => {
                    for line in lines[..last].split(|byte| *byte == b'\n') {
                        self.emit(line, true, received, handler);
                    }
                }
            }
            data = rest;
        }
        self.keep(data, received, handler);
    }

    /// Keeps the start of a line until its end arrives; a piece of [`MAX_SEGMENT`] is given
    /// at once.
    fn keep(&mut self, data: &[u8], received: Instant, handler: &mut dyn OutputHandler) {
        self.pending.extend_from_slice(data);
        if self.pending.len() >= MAX_SEGMENT {
            let pending = std::mem::take(&mut self.pending);
            self.emit(&pending, false, received, handler);
            self.pending = pending;
            self.pending.clear();
        }
    }

    pub(super) fn finish(&mut self, handler: &mut dyn OutputHandler) {
        if !self.pending.is_empty() || !self.at_line_start {
            let pending = std::mem::take(&mut self.pending);
            self.emit(&pending, true, Instant::now(), handler);
        }
    }

    fn emit(
        &mut self,
        bytes: &[u8],
        ends_line: bool,
        received: Instant,
        handler: &mut dyn OutputHandler,
    ) {
        let bytes = if ends_line {
            bytes.strip_suffix(b"\r").unwrap_or(bytes)
        } else {
            bytes
        };
        // Validating first is much faster than the lossy path when the text is valid UTF-8.
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(bytes),
        };
        handler.on_segment(&Segment {
            source: self.source,
            text: &text,
            starts_line: self.at_line_start,
            ends_line,
            received,
        });
        self.at_line_start = ends_line;
    }
}

/// The lines of `text` (whole lines, each ending with `\n`), without the line breaks (and a
/// `\r` before one), as the splitter gives them.
pub(crate) fn lines_of(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', text.as_bytes()).map(move |newline| {
        let line = &text[start..newline];
        start = newline + 1;
        line.strip_suffix('\r').unwrap_or(line)
    })
}

/// Gives `text` (whole lines, each ending with `\n`) to `handler` one line at a time.
pub(crate) fn each_line<H: OutputHandler + ?Sized>(
    source: Source,
    text: &str,
    received: Instant,
    handler: &mut H,
) {
    for line in lines_of(text) {
        handler.on_segment(&Segment {
            source,
            text: line,
            starts_line: true,
            ends_line: true,
            received,
        });
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Instant;

    use super::*;

    #[derive(Default)]
    pub(crate) struct Collect(pub(crate) Vec<(String, bool, bool)>);

    impl OutputHandler for Collect {
        fn on_segment(&mut self, segment: &Segment<'_>) {
            self.0.push((
                segment.text.to_owned(),
                segment.starts_line,
                segment.ends_line,
            ));
        }
        fn on_tick(&mut self, _: Instant, _: Instant) {}
    }

    #[test]
    fn splitter_handles_partial_lines_crlf_and_invalid_utf8() {
        let mut handler = Collect::default();
        let mut splitter = LineSplitter::new(Source::Stdout);
        splitter.push(b"hel", None, Instant::now(), &mut handler);
        splitter.push(
            b"lo\r\nwor\xffld\nlone\rcr\ntail",
            None,
            Instant::now(),
            &mut handler,
        );
        splitter.finish(&mut handler);
        let texts: Vec<_> = handler.0.iter().map(|(t, _, _)| t.as_str()).collect();
        assert_eq!(texts, ["hello", "wor\u{fffd}ld", "lone\rcr", "tail"]);
        // Whole lines of valid text come as one run, given line by line by default.
        let mut handler = Collect::default();
        splitter.push(b"one\r\n\ntwo\nthr", None, Instant::now(), &mut handler);
        splitter.push(b"ee\n", None, Instant::now(), &mut handler);
        let texts: Vec<_> = handler.0.iter().map(|(t, _, _)| t.as_str()).collect();
        assert_eq!(texts, ["one", "", "two", "three"]);
        assert!(handler.0.iter().all(|(_, starts, ends)| *starts && *ends));
    }

    /// A run's lines, the first of them the reader parsed, and the events given for its lines
    /// from there on.
    type Run = (Vec<String>, usize, Vec<Option<Vec<AgentEvent>>>);

    /// Takes runs with what the reader thread parsed of them, as the transcript does.
    #[derive(Default)]
    struct Runs {
        /// Per run: its lines, and the events given for its lines from `first` on.
        runs: Vec<Run>,
    }

    impl OutputHandler for Runs {
        fn on_segment(&mut self, _: &Segment<'_>) {}
        fn on_lines(&mut self, _: Source, text: &str, _: Instant, parsed: Option<ParsedLines>) {
            let lines: Vec<String> = lines_of(text).map(str::to_owned).collect();
            let mut parsed = parsed.expect("the reader parsed every run of valid lines");
            let first = parsed.first;
            let events = (first..lines.len())
                .map(|_| parsed.next_line().map(Iterator::collect))
                .collect();
            assert_eq!(
                parsed.counts.len(),
                0,
                "as many lines were parsed as the run ends with"
            );
            self.runs.push((lines, first, events));
        }
        fn on_tick(&mut self, _: Instant, _: Instant) {}
    }

    #[test]
    fn the_reader_parses_the_lines_the_splitter_gives_as_a_run() {
        // Lines that are events (their text, twice: two events) and lines that are not.
        let parser: LineParser = Box::new(|line: &str| {
            let text = line.strip_prefix('{')?;
            Some(vec![
                AgentEvent::Text(text.to_owned()),
                AgentEvent::Quiet,
                AgentEvent::Final(text.to_owned()),
            ])
        });
        let stream: String = (0..200)
            .map(|n| {
                if n % 7 == 3 {
                    format!("plain {n}\r\n")
                } else {
                    format!("{{event {n}\n")
                }
            })
            .collect();
        // Cut anywhere: in a line, after its \r, right after its end.
        for cut in [1, 5, 9, 13, 37, 64, 1000] {
            let mut handler = Runs::default();
            let mut splitter = LineSplitter::new(Source::Stdout);
            let mut at_line_start = true;
            for chunk in stream.as_bytes().chunks(cut) {
                let parsed = parse_run(chunk, &mut at_line_start, &parser);
                splitter.push(chunk, parsed, Instant::now(), &mut handler);
            }
            // In small chunks no whole line may follow a line's end: then there is no run.
            assert!(cut < 37 || handler.runs.len() > 1, "cut {cut}");
            for (lines, first, events) in &handler.runs {
                let (share, of) = READER_SHARE;
                assert_eq!(*first, lines.len() - lines.len() * share / of, "cut {cut}");
                assert_eq!(events.len(), lines.len() - first, "cut {cut}");
                for (line, events) in lines[*first..].iter().zip(events) {
                    let expected = line.strip_prefix('{').map(|text| {
                        vec![
                            AgentEvent::Text(text.to_owned()),
                            AgentEvent::Quiet,
                            AgentEvent::Final(text.to_owned()),
                        ]
                    });
                    assert_eq!(events, &expected, "cut {cut}");
                }
            }
        }
    }

    #[test]
    fn splitter_cuts_huge_lines_into_bounded_segments() {
        let mut handler = Collect::default();
        let mut splitter = LineSplitter::new(Source::Stdout);
        let chunk = vec![b'a'; MAX_SEGMENT];
        for _ in 0..3 {
            splitter.push(&chunk, None, Instant::now(), &mut handler);
        }
        splitter.push(b"end\n", None, Instant::now(), &mut handler);
        splitter.finish(&mut handler);
        assert_eq!(handler.0.len(), 4);
        assert!(handler.0.iter().all(|(t, _, _)| t.len() <= MAX_SEGMENT));
        assert_eq!((handler.0[0].1, handler.0[0].2), (true, false));
        assert_eq!((handler.0[1].1, handler.0[1].2), (false, false));
        assert_eq!(handler.0[3], ("end".to_owned(), false, true));
    }
}
