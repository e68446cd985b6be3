//! Grammar masks across steps (SAMPLER.md section 9 and the seed's
//! `_get_so_mask`).
//!
//! Per step the engine builds `nextn + 1` bit masks, each `[batch,
//! ceil(V/32)]` u32 words (bit `t % 32` of word `t / 32` set = token t
//! allowed): mask j is for row j of every request (row 0's input is the last
//! real token, row j's input is draft j). For a request with a grammar the
//! matcher fills mask 0 in its current state, then accepts the drafts one by
//! one, filling one mask per accepted draft, and stops at the first draft the
//! grammar forbids (the rows after it keep the last mask: that draft is
//! rejected at its verify row anyway) or at a draft that ends the grammar
//! (EOS: the rows after it are past the end of the output); then it rolls
//! the trial back.
//!
//! Any matcher works through [`GrammarMatcher`]. A matcher error (or a mask
//! that allows nothing) fails only its own request: status error, tokens -1.
//! Built in: [`JsonMatcher`], a small documented JSON recognizer over a
//! token vocabulary of strings (used by the tests and the example). With the
//! cargo feature `grammar-llguidance`, `llg::LlgMatcher` adapts the
//! `llguidance` crate (JSON schema, Lark, regex grammars).
//!
//! Device upload (for backends): the masks reach a backend through
//! `StepPlan::masks` / `StepPlan::has_mask`; on CUDA the upload belongs on a
//! side stream with an event the sampling stream waits on.

use crate::error::RequestError;

#[cfg(feature = "grammar-llguidance")]
pub mod llg;

/// A grammar matcher the engine drives (any engine: llguidance, xgrammar, ...).
pub trait GrammarMatcher: Send {
    /// Sets the bits of the tokens allowed next (`mask` is zeroed, `ceil(V/32)` words).
    fn fill_mask(&mut self, mask: &mut [u32]) -> Result<(), String>;
    /// Advances by one token (allowed by the last mask).
    fn accept(&mut self, token: i32) -> Result<(), String>;
    /// Undoes the last `tokens` accepted tokens.
    fn rollback(&mut self, tokens: usize) -> Result<(), String>;
    /// True once the grammar has ended (e.g. after EOS); the request then finishes.
    fn is_finished(&self) -> bool {
        false
    }
}

/// Whether `token` is allowed by `mask` (ids beyond the mask: no).
pub fn mask_allows(mask: &[u32], token: i32) -> bool {
    token >= 0 && mask.get(token as usize / 32).is_some_and(|w| w >> (token as u32 % 32) & 1 == 1)
}

/// The `drafts.len() + 1` masks of one request (mask j for row j), as the
/// seed describes: fill, accept drafts while allowed, roll back.
pub fn request_masks(m: &mut dyn GrammarMatcher, drafts: &[i32], words: usize) -> Result<Vec<Vec<u32>>, String> {
    let mut masks = Vec::with_capacity(drafts.len() + 1);
    let mut mask = vec![0u32; words];
    m.fill_mask(&mut mask)?;
    masks.push(mask);
    let mut accepted = 0;
    for &d in drafts {
        if !mask_allows(masks.last().unwrap(), d) {
            break;
        }
        m.accept(d)?;
        accepted += 1;
        if m.is_finished() {
            // The draft ended the grammar (EOS): later rows are past the end
            // of the output; they keep the last mask (an empty one would fail
            // the request).
            break;
        }
        let mut mask = vec![0u32; words];
        m.fill_mask(&mut mask)?;
        masks.push(mask);
    }
    while masks.len() < drafts.len() + 1 {
        let last = masks.last().unwrap().clone();
        masks.push(last);
    }
    if accepted > 0 {
        m.rollback(accepted)?;
    }
    Ok(masks)
}

/// The masks of one step in the reference layout: `masks[j]` is `[batch,
/// words]` for row j of every request (`nextn + 1` of them). Requests
/// without a grammar have all bits set and `constrained[b] == false`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepMasks {
    /// u32 words per mask row, `ceil(V/32)`.
    pub words: usize,
    /// Requests in the batch.
    pub batch: usize,
    /// `nextn + 1` masks of `[batch, words]` u32.
    pub masks: Vec<Vec<u32>>,
    /// Per request: whether it has a grammar.
    pub constrained: Vec<bool>,
    /// Per request: the matcher error, if its masks could not be built.
    pub errors: Vec<Option<String>>,
}

impl StepMasks {
    /// An unconstrained step (all bits set).
    pub fn new(nextn: usize, batch: usize, vocab: usize) -> StepMasks {
        let words = vocab.div_ceil(32);
        StepMasks {
            words,
            batch,
            masks: vec![vec![u32::MAX; batch * words]; nextn + 1],
            constrained: vec![false; batch],
            errors: vec![None; batch],
        }
    }
    /// Writes request `b`'s masks (one per row, at most `nextn + 1`).
    pub fn set(&mut self, b: usize, masks: &[Vec<u32>]) {
        self.constrained[b] = true;
        for (j, m) in masks.iter().enumerate().take(self.masks.len()) {
            let dst = &mut self.masks[j][b * self.words..(b + 1) * self.words];
            let k = m.len().min(self.words);
            dst.fill(0);
            dst[..k].copy_from_slice(&m[..k]);
        }
    }
    /// Builds request `b`'s masks with its matcher; an error is recorded for
    /// that request only.
    pub fn fill(&mut self, b: usize, m: &mut dyn GrammarMatcher, drafts: &[i32]) {
        match request_masks(m, drafts, self.words) {
            Ok(ms) => self.set(b, &ms),
            Err(e) => {
                self.constrained[b] = true;
                self.errors[b] = Some(e);
            }
        }
    }
    /// `Request::masks` of request `b` with `rows` rows: `None` when
    /// unconstrained, else mask j for row j.
    pub fn request(&self, b: usize, rows: usize) -> Option<Vec<Vec<u32>>> {
        if !self.constrained[b] {
            return None;
        }
        Some(
            (0..rows)
                .map(|j| self.masks[j.min(self.masks.len() - 1)][b * self.words..(b + 1) * self.words].to_vec())
                .collect(),
        )
    }
    /// The error of request `b` (a matcher error fails only it).
    pub fn error(&self, b: usize) -> Option<RequestError> {
        self.errors[b].clone().map(RequestError::Matcher)
    }
    /// Bytes of the step's masks (`(nextn + 1) * batch * words * 4`).
    pub fn bytes(&self) -> usize {
        self.masks.len() * self.batch * self.words * 4
    }
}

// ---------------------------------------------------------------------------
// A small built-in JSON matcher.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    Obj,
    Arr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Expect a value (after `:` or `,` in an array, or at the root).
    Value,
    /// After `[`: a value or `]`.
    ValueOrClose,
    /// After `{`: a key or `}`.
    KeyOrClose,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// Inside a string.
    Str { key: bool },
    /// Inside an integer (`digits`: at least one digit seen).
    Num { digits: bool },
    /// Inside `true` / `false` / `null`.
    Lit { word: &'static str, at: usize },
    /// After a value.
    After,
    /// After EOS.
    Ended,
}

/// Char-level state of the JSON subset.
#[derive(Clone, Debug, PartialEq, Eq)]
struct JsonState {
    stack: Vec<Ctx>,
    mode: Mode,
    root_seen: bool,
}

/// Grammar of [`JsonMatcher`]: JSON values made of objects, arrays, strings
/// without escapes, integers, `true`, `false`, `null` and spaces, nested at
/// most `max_depth` deep; with `root_object`, the root must be an object.
/// EOS is allowed exactly when one complete value has been read; after EOS
/// nothing is allowed.
#[derive(Clone, Debug)]
pub struct JsonMatcher {
    vocab: Vec<String>,
    eos: i32,
    root_object: bool,
    max_depth: usize,
    /// States after each accepted token (the last is current).
    history: Vec<JsonState>,
}

impl JsonMatcher {
    /// A matcher over `vocab` (token id = index; the text of each token) with
    /// end-of-sequence token `eos`.
    pub fn new(vocab: Vec<String>, eos: i32, root_object: bool) -> JsonMatcher {
        JsonMatcher {
            vocab,
            eos,
            root_object,
            max_depth: 4,
            history: vec![JsonState { stack: Vec::new(), mode: Mode::Value, root_seen: false }],
        }
    }
    fn state(&self) -> &JsonState {
        self.history.last().unwrap()
    }
    fn complete(s: &JsonState) -> bool {
        s.stack.is_empty() && s.root_seen && matches!(s.mode, Mode::After | Mode::Num { digits: true })
    }
    fn step(&self, s: &mut JsonState, c: char) -> bool {
        let ws = c == ' ' || c == '\n';
        loop {
            match s.mode {
                Mode::Ended => return false,
                Mode::Value | Mode::ValueOrClose => {
                    if ws {
                        return true;
                    }
                    if s.mode == Mode::ValueOrClose && c == ']' {
                        s.stack.pop();
                        s.mode = Mode::After;
                        return true;
                    }
                    let root = s.stack.is_empty();
                    if root && (s.root_seen || (self.root_object && c != '{')) {
                        return false;
                    }
                    s.root_seen = true;
                    match c {
                        '{' | '[' if s.stack.len() >= self.max_depth => return false,
                        '{' => {
                            s.stack.push(Ctx::Obj);
                            s.mode = Mode::KeyOrClose;
                        }
                        '[' => {
                            s.stack.push(Ctx::Arr);
                            s.mode = Mode::ValueOrClose;
                        }
                        '"' => s.mode = Mode::Str { key: false },
                        '-' => s.mode = Mode::Num { digits: false },
                        '0'..='9' => s.mode = Mode::Num { digits: true },
                        't' => s.mode = Mode::Lit { word: "true", at: 1 },
                        'f' => s.mode = Mode::Lit { word: "false", at: 1 },
                        'n' => s.mode = Mode::Lit { word: "null", at: 1 },
                        _ => return false,
                    }
                    return true;
                }
                Mode::KeyOrClose | Mode::Key => {
                    if ws {
                        return true;
                    }
                    if c == '"' {
                        s.mode = Mode::Str { key: true };
                        return true;
                    }
                    if s.mode == Mode::KeyOrClose && c == '}' {
                        s.stack.pop();
                        s.mode = Mode::After;
                        return true;
                    }
                    return false;
                }
                Mode::Colon => {
                    if ws {
                        return true;
                    }
                    if c == ':' {
                        s.mode = Mode::Value;
                        return true;
                    }
                    return false;
                }
                Mode::Str { key } => {
                    if c == '"' {
                        s.mode = if key { Mode::Colon } else { Mode::After };
                        return true;
                    }
                    return c != '\\' && !c.is_control();
                }
                Mode::Num { digits } => {
                    if c.is_ascii_digit() {
                        s.mode = Mode::Num { digits: true };
                        return true;
                    }
                    if !digits {
                        return false;
                    }
                    s.mode = Mode::After; // the number ended: read c as what follows it
                }
                Mode::Lit { word, at } => {
                    if word.as_bytes()[at] as char != c {
                        return false;
                    }
                    s.mode = if at + 1 == word.len() { Mode::After } else { Mode::Lit { word, at: at + 1 } };
                    return true;
                }
                Mode::After => {
                    if ws {
                        return true;
                    }
                    match (c, s.stack.last()) {
                        (',', Some(Ctx::Obj)) => s.mode = Mode::Key,
                        (',', Some(Ctx::Arr)) => s.mode = Mode::Value,
                        ('}', Some(Ctx::Obj)) | (']', Some(Ctx::Arr)) => {
                            s.stack.pop();
                            s.mode = Mode::After;
                        }
                        _ => return false,
                    }
                    return true;
                }
            }
        }
    }
    /// The state after `token` from `s`, or `None` when forbidden.
    fn advance(&self, s: &JsonState, token: i32) -> Option<JsonState> {
        if s.mode == Mode::Ended {
            return None;
        }
        if token == self.eos {
            return Self::complete(s).then(|| JsonState { mode: Mode::Ended, ..s.clone() });
        }
        let text = self.vocab.get(usize::try_from(token).ok()?)?;
        if text.is_empty() {
            return None;
        }
        let mut n = s.clone();
        text.chars().all(|c| self.step(&mut n, c)).then_some(n)
    }
    /// Whether the whole token sequence is allowed from the start.
    pub fn allows_sequence(&self, tokens: &[i32]) -> bool {
        let mut s = self.history[0].clone();
        for &t in tokens {
            match self.advance(&s, t) {
                Some(n) => s = n,
                None => return false,
            }
        }
        true
    }
}

impl GrammarMatcher for JsonMatcher {
    fn fill_mask(&mut self, mask: &mut [u32]) -> Result<(), String> {
        let s = self.state().clone();
        for t in 0..self.vocab.len().max(self.eos as usize + 1) {
            if t / 32 < mask.len() && self.advance(&s, t as i32).is_some() {
                mask[t / 32] |= 1 << (t % 32);
            }
        }
        Ok(())
    }
    fn accept(&mut self, token: i32) -> Result<(), String> {
        match self.advance(self.state(), token) {
            Some(n) => {
                self.history.push(n);
                Ok(())
            }
            None => Err(format!("token {token} is not allowed by the JSON grammar here")),
        }
    }
    fn rollback(&mut self, tokens: usize) -> Result<(), String> {
        if tokens >= self.history.len() {
            return Err(format!("cannot roll back {tokens} tokens (only {} accepted)", self.history.len() - 1));
        }
        self.history.truncate(self.history.len() - tokens);
        Ok(())
    }
    fn is_finished(&self) -> bool {
        self.state().mode == Mode::Ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> Vec<String> {
        ["{", "}", "\"a\"", ":", "1", ",", "[", "]", " ", "x", "<eos>"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn json_matcher_masks_and_rollback() {
        let mut m = JsonMatcher::new(vocab(), 10, true);
        let mut mask = vec![0u32; 1];
        m.fill_mask(&mut mask).unwrap();
        assert!(mask_allows(&mask, 0) && !mask_allows(&mask, 1) && !mask_allows(&mask, 10));
        // drafts: "{" "\"a\"" "}" -> the third is forbidden (needs ':').
        let ms = request_masks(&mut m, &[0, 2, 1], 1).unwrap();
        assert_eq!(ms.len(), 4);
        assert!(mask_allows(&ms[1], 2) && mask_allows(&ms[1], 1));
        assert!(mask_allows(&ms[2], 3) && !mask_allows(&ms[2], 1));
        assert_eq!(ms[3], ms[2]);
        assert_eq!(m.history.len(), 1, "trial rolled back");
        assert!(m.allows_sequence(&[0, 2, 3, 4, 1, 10]));
        assert!(!m.allows_sequence(&[0, 1, 1]));
    }
}
