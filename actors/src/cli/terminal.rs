//! A job's output shown on a terminal: its colours kept, every other control character and
//! sequence shown as text (`^[`, `^G`, as `cat -v` shows them), so that a job cannot move the
//! cursor, rewrite what was printed before, retitle the window or set the clipboard of whoever
//! reads its output (kubectl's CVE-2021-25743). Piped or redirected, output stays byte for
//! byte: only a terminal interprets these sequences.

/// The longest colour sequence (`ESC [ 38;2;255;255;255 m` and its like) kept as one; a longer
/// run of parameters is not a colour and is shown as text.
const MAX_SGR_BYTES: usize = 48;

/// What is printed of a job's output on a terminal, read by read: a sequence or a character
/// split between two reads is held until its end comes.
#[derive(Debug, Default)]
pub struct Sanitizer {
    held: Vec<u8>,
}

impl Sanitizer {
    /// `bytes`, made safe; a tail that may be the start of a colour sequence (or of a control
    /// character's two bytes) is held for the next read.
    pub fn clean(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(bytes);
        let input = std::mem::take(&mut self.held);
        let (out, held_from) = sanitize(&input, false);
        if let Some(at) = held_from {
            self.held = input[at..].to_vec();
        }
        out
    }

    /// What is held, shown as text: the output ended (or its reads did) in mid-sequence.
    pub fn finish(&mut self) -> Vec<u8> {
        sanitize(&std::mem::take(&mut self.held), true).0
    }
}

/// `input` made safe, and where what may continue in a later read starts, unless `ended`.
fn sanitize(input: &[u8], ended: bool) -> (Vec<u8>, Option<usize>) {
    let mut out = Vec::with_capacity(input.len());
    let mut at = 0;
    while at < input.len() {
        at += match step(&input[at..]) {
            Step::Keep(n) => {
                out.extend_from_slice(&input[at..at + n]);
                n
            }
            Step::Show(n, shown) => {
                out.extend_from_slice(shown.as_bytes());
                n
            }
            Step::Wait if !ended => return (out, Some(at)),
            // Never to be completed: an escape shows as text, half a character as U+FFFD.
            Step::Wait => {
                let shown = if input[at] == 0x1b { caret(0x1b) } else { char::REPLACEMENT_CHARACTER.to_string() };
                out.extend_from_slice(shown.as_bytes());
                1
            }
        };
    }
    (out, None)
}

/// `text` made safe at once: whole lines, whose sequences cannot continue in a later read.
pub fn clean_text(text: &str) -> String {
    let mut sanitizer = Sanitizer::default();
    let mut out = sanitizer.clean(text.as_bytes());
    out.extend(sanitizer.finish());
    String::from_utf8_lossy(&out).into_owned()
}

/// What to do with the bytes at the start of `rest`.
enum Step {
    /// Print these many bytes as they are.
    Keep(usize),
    /// Print this text in place of these many bytes.
    Show(usize, String),
    /// Too few bytes to tell: wait for more.
    Wait,
}

fn step(rest: &[u8]) -> Step {
    match rest[0] {
        b'\n' | b'\t' | b'\r' => Step::Keep(1),
        0x1b => escape(rest),
        byte @ (0x00..=0x1f | 0x7f) => Step::Show(1, caret(byte)),
        // U+0080 to U+009F, C1 controls (U+009B is a CSI on its own) in UTF-8.
        0xc2 => match rest.get(1) {
            None => Step::Wait,
            Some(second @ 0x80..=0x9f) => Step::Show(2, format!("M-{}", caret(second - 0x80))),
            Some(_) => Step::Keep(2),
        },
        _ => Step::Keep(1),
    }
}

/// An escape: a colour sequence (`ESC [ params m`) is kept whole; anything else shows its ESC
/// as `^[` and the rest as the text it is.
fn escape(rest: &[u8]) -> Step {
    let shown = Step::Show(1, caret(0x1b));
    match rest.get(1) {
        None => return Step::Wait,
        Some(b'[') => {}
        Some(_) => return shown,
    }
    let params = rest[2..].iter().take(MAX_SGR_BYTES).take_while(|b| b.is_ascii_digit() || matches!(b, b';' | b':'));
    let end = 2 + params.count();
    match rest.get(end) {
        Some(b'm') => Step::Keep(end + 1),
        None if end < MAX_SGR_BYTES => Step::Wait,
        _ => shown,
    }
}

/// A control byte as `cat -v` shows it: `^[` for ESC, `^G` for BEL, `^?` for DEL.
fn caret(byte: u8) -> String {
    format!("^{}", (byte ^ 0x40) as char)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(bytes: &[u8]) -> String {
        let mut sanitizer = Sanitizer::default();
        let mut out = sanitizer.clean(bytes);
        out.extend(sanitizer.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn colours_lines_and_progress_bars_pass_and_other_controls_show_as_text() {
        assert_eq!(clean(b"\x1b[1;31merror\x1b[0m: 50%\r100%\tdone\n"), "\x1b[1;31merror\x1b[0m: 50%\r100%\tdone\n");
        assert_eq!(clean(b"\x1b[38;2;1;2;3mtrue colour\x1b[m"), "\x1b[38;2;1;2;3mtrue colour\x1b[m");
        assert_eq!(clean(b"\x1b[2J\x1b[H"), "^[[2J^[[H", "clear the screen, move the cursor");
        assert_eq!(clean(b"\x1b]52;c;c3VkbwA=\x07"), "^[]52;c;c3VkbwA=^G", "set the clipboard");
        assert_eq!(clean(b"\x1b]0;title\x1b\\"), "^[]0;title^[\\", "retitle the window");
        assert_eq!(clean(b"back\x08\x7f\x00"), "back^H^?^@");
        assert_eq!(clean("\u{9b}2J é ✓".as_bytes()), "M-^[2J é ✓", "an 8-bit CSI; other characters as they are");
        let long = format!("\x1b[{}m", "1;".repeat(MAX_SGR_BYTES));
        assert_eq!(clean(long.as_bytes()), format!("^[[{}m", "1;".repeat(MAX_SGR_BYTES)), "too long to be a colour");
    }

    #[test]
    fn a_sequence_split_between_reads_is_judged_whole() {
        let mut sanitizer = Sanitizer::default();
        assert_eq!(sanitizer.clean(b"a\x1b[3"), b"a");
        assert_eq!(sanitizer.clean(b"1mred\x1b"), b"\x1b[31mred");
        assert_eq!(sanitizer.clean(b"[K"), b"^[[K");
        assert_eq!(sanitizer.clean(b"\xc2"), b"");
        assert_eq!(sanitizer.clean(b"\x9b"), b"M-^[");
        assert_eq!(sanitizer.clean(b"\x1b["), b"");
        assert_eq!(sanitizer.finish(), b"^[[", "the output ended mid-sequence");
        assert_eq!(sanitizer.clean(b"\xc2"), b"");
        assert_eq!(sanitizer.finish(), "\u{fffd}".as_bytes(), "half a character");
        assert_eq!(clean_text("x\x1b[5m\x1b"), "x\x1b[5m^[");
    }
}
