//! Adapter for the `llguidance` grammar engine (cargo feature
//! `grammar-llguidance`): JSON schema, Lark and regex grammars compiled
//! against the engine's token vocabulary, driven through [`GrammarMatcher`].
//!
//! ```ignore
//! let tok = LlgTokenizer::from_words(&words, eos)?;          // once per model
//! let m = tok.json_schema(serde_json::json!({"type": "object"}))?; // per request
//! request.grammar = Some(Box::new(m));
//! ```

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};

use super::GrammarMatcher;

/// The token vocabulary and compiled-grammar factory, shared by all requests of a model.
#[derive(Clone)]
pub struct LlgTokenizer {
    factory: Arc<ParserFactory>,
    vocab: usize,
}

impl std::fmt::Debug for LlgTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlgTokenizer").field("vocab", &self.vocab).finish()
    }
}

impl LlgTokenizer {
    /// A vocabulary of token byte strings (token id = index) with end-of-sequence
    /// token `eos`. Special tokens (EOS included) start with the byte 0xFF
    /// (toktrie's convention), e.g. `b"\xFF<|end|>"`.
    pub fn from_words(words: &[Vec<u8>], eos: u32) -> Result<LlgTokenizer, String> {
        let info = TokRxInfo::new(words.len() as u32, eos);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(TokTrie::from(&info, words)));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(LlgTokenizer { factory: Arc::new(factory), vocab: words.len() })
    }

    /// A matcher for any llguidance grammar.
    pub fn matcher(&self, grammar: TopLevelGrammar) -> LlgMatcher {
        LlgMatcher { m: Matcher::new(self.factory.create_parser(grammar)) }
    }

    /// A matcher for a JSON schema.
    pub fn json_schema(&self, schema: serde_json::Value) -> LlgMatcher {
        self.matcher(TopLevelGrammar::from_json_schema(schema))
    }

    /// A matcher for a regular expression.
    pub fn regex(&self, rx: &str) -> LlgMatcher {
        self.matcher(TopLevelGrammar::from_regex(rx))
    }
}

/// One request's llguidance matcher. A grammar that fails to compile gives a
/// matcher in the error state: its first mask fails the request (only it).
pub struct LlgMatcher {
    m: Matcher,
}

impl std::fmt::Debug for LlgMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlgMatcher").field("stopped", &self.m.is_stopped()).field("error", &self.m.get_error()).finish()
    }
}

impl GrammarMatcher for LlgMatcher {
    fn fill_mask(&mut self, mask: &mut [u32]) -> Result<(), String> {
        let v = self.m.compute_mask_or_eos().map_err(|e| e.to_string())?;
        let src = v.as_slice();
        let k = src.len().min(mask.len());
        mask[..k].copy_from_slice(&src[..k]);
        Ok(())
    }
    fn accept(&mut self, token: i32) -> Result<(), String> {
        let t = u32::try_from(token).map_err(|_| format!("token {token}"))?;
        self.m.consume_token(t).map_err(|e| e.to_string())
    }
    fn rollback(&mut self, tokens: usize) -> Result<(), String> {
        self.m.rollback(tokens).map_err(|e| e.to_string())
    }
    fn is_finished(&self) -> bool {
        self.m.is_stopped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig, EngineRequest, SyntheticModel};
    use crate::{BackendKind, Sampler, SamplerConfig, SamplingParams};

    fn words() -> Vec<Vec<u8>> {
        let mut w: Vec<Vec<u8>> = [
            "{", "}", "\"", "a", "b", ":", ",", "1", "2", "0", "\"a\"", "\":", "{\"", "x", "true", "[", "]", " ", "-",
            "7}",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        w.push(b"\xFF<|end|>".to_vec());
        w
    }

    #[test]
    fn llguidance_constrains_output_to_a_json_schema() {
        let words = words();
        let eos = (words.len() - 1) as i32;
        let tok = LlgTokenizer::from_words(&words, eos as u32).unwrap();
        let schema = serde_json::json!({
            "type": "object",
            "properties": { "a": { "type": "integer" } },
            "required": ["a"],
            "additionalProperties": false
        });
        let v = words.len() as u32;
        let s =
            Sampler::new(SamplerConfig { vocab_size: v, force_topk: 0, nextn: 3, backend: BackendKind::Cpu }).unwrap();
        let mut e = Engine::new(s, EngineConfig { max_num_seqs: 4, nextn: 3, ..Default::default() }).unwrap();
        for id in 0..4 {
            let mut r =
                EngineRequest::new(id, vec![0], SamplingParams { seq_seed: Some(id), ..Default::default() }, 24);
            r.eos = Some(eos);
            r.grammar = Some(Box::new(tok.json_schema(schema.clone())));
            e.add_request(r).unwrap();
        }
        let mut model = SyntheticModel::new(v as usize, 5, 0.5);
        model.bias = vec![(eos, 8.0), (1, 3.0)];
        e.run_to_completion(&mut model, 100).unwrap();
        let fin = e.take_finished();
        assert_eq!(fin.len(), 4);
        let mut complete = 0;
        for f in fin {
            assert!(f.status.is_ok(), "{:?}", f.status);
            let text: Vec<u8> =
                f.output.iter().filter(|&&t| t != eos).flat_map(|&t| words[t as usize].clone()).collect();
            let text = String::from_utf8(text).unwrap();
            // A request ends on EOS or when llguidance stops the grammar (only EOS could follow).
            if f.output.last() == Some(&eos) || f.output.len() < 24 {
                complete += 1;
                let j: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
                // An integer (serde_json reads `-0` as a float).
                assert!(j["a"].as_f64().is_some_and(|x| x.fract() == 0.0), "{text}");
                assert_eq!(j.as_object().unwrap().len(), 1);
            } else {
                assert!(text.starts_with('{'), "{text}");
            }
        }
        assert!(complete > 0);
    }
}
