//! The logits loader on the committed real-model fixture (all-MiniLM-L6-v2).

use std::path::Path;

use sampler::logits::{load_safetensors, synthetic, LogitsError};
use sampler_host::{BackendKind, Request, Sampler, SamplerConfig, SamplingParams};

fn fixture() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/minilm-logits.safetensors"))
}

#[test]
fn fixture_loads_and_samples_its_own_tokens() {
    let l = load_safetensors(fixture(), "logits").unwrap();
    assert_eq!((l.rows, l.vocab), (16, 30522));
    // Unmasked rows rank their input token first: at temperature 0.15 row 15 ("water", id 2300) is near certain.
    let mut s =
        Sampler::new(SamplerConfig { vocab_size: 30522, force_topk: 1024, nextn: 5, backend: BackendKind::Cpu })
            .unwrap();
    let p = SamplingParams { temperature: 0.15, seq_seed: Some(3), ..Default::default() };
    let out = s.sample(l.row(15), &[Request::prefill(p, 7)]).unwrap();
    assert_eq!(out.requests[0].emitted, vec![2300]);
}

#[test]
fn loader_errors_name_the_problem() {
    assert!(matches!(load_safetensors(Path::new("/nonexistent.safetensors"), "logits"), Err(LogitsError::Io { .. })));
    assert!(matches!(load_safetensors(fixture(), "nope"), Err(LogitsError::Tensor { .. })));
    // A tensor of the wrong rank is refused, not misread.
    assert!(matches!(load_safetensors(fixture(), "row_positions"), Err(LogitsError::Tensor { .. })));
    let bad = std::env::temp_dir().join("sampler-not-safetensors.bin");
    std::fs::write(&bad, b"not a safetensors file").unwrap();
    assert!(matches!(load_safetensors(&bad, "logits"), Err(LogitsError::Format { .. })));
}

#[test]
fn synthetic_logits_are_deterministic_and_llm_shaped() {
    let a = synthetic(4, 1000, 7);
    assert_eq!(a, synthetic(4, 1000, 7));
    assert_ne!(a.data, synthetic(4, 1000, 8).data);
    for r in 0..4 {
        let row = a.row(r);
        let max = row.iter().cloned().fold(f32::MIN, f32::max);
        // A head of boosted tokens stands well above the N(0, 1) background.
        assert!(max > 8.0, "row {r} max {max}");
        assert!(row.iter().filter(|&&x| x > 6.0).count() >= 32);
    }
}
