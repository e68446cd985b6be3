"""Every golden case (conformance/golden plus the landed next/ cases) through the
Python API equals the Rust conformance runner's result bitwise."""

import json

import numpy as np
import pytest

import sampler_py as sp
from conftest import GOLDEN_DIR, canon, golden_paths, num, run_case_python

PATHS = golden_paths()


def test_golden_dir_found():
    # Fails (never skips) when the cases are missing: a run of zero cases must not pass.
    assert GOLDEN_DIR.is_dir(), f"golden cases not found at {GOLDEN_DIR} (scripts/sync-golden.sh)"
    assert len(PATHS) >= 80, f"expected the golden cases under {GOLDEN_DIR}, found {len(PATHS)}"
    assert any(p.parent.name == "next" for p in PATHS), "landed next/ cases missing"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_golden_case_bitwise(path):
    text = path.read_text()
    case = json.loads(text)
    rust = json.loads(sp.run_case_json(text, "cpu"))
    out, doc = run_case_python(case)
    assert canon(doc) == canon(rust)
    # The Rust document of the Python-built step is the same too.
    assert canon(json.loads(out.result_json())) == canon(rust)
    # And the statuses agree with the case's expectation (ok vs error).
    if "expected" in case:
        want = [q["status"].startswith("error") for q in case["expected"]["requests"]]
        assert [e is not None for e in out.errors] == want


def test_golden_f16_logits_equal_widened_f32():
    # float16 logits are widened on the host: same result as the float32 array of the same values.
    path = next(p for p in PATHS if p.name.startswith("case-101-000"))
    case = json.loads(path.read_text())
    _, doc16 = run_case_python(case, logits_dtype=np.float16)
    v = case["vocab_size"]
    rounded = dict(case, logits=np.array([[num(x) for x in row] for row in case["logits"]], dtype=np.float16).astype(np.float32).reshape(-1, v).tolist())
    _, doc32 = run_case_python(rounded)
    assert canon(doc16) == canon(doc32)
