"""The repository README's Python code runs as written (issue 26).

The blocks are read from README.md itself, so a change there is tested here:
the first (numpy, CPU) always; the second (torch CUDA tensors, continuing the
first) where torch sees a GPU.
"""

import pathlib
import re

import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def python_blocks():
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)


def run_numpy_block():
    blocks = python_blocks()
    assert len(blocks) >= 2, "README.md: expected a numpy block and a torch block"
    ns = {}
    exec(compile(blocks[0], "README.md python block 1", "exec"), ns)
    return blocks, ns


def test_readme_numpy_block_runs_and_says_what_it_prints(capsys):
    _, ns = run_numpy_block()
    printed = capsys.readouterr().out
    assert printed.strip(), "the block prints its results"
    tokens, out = ns["tokens"], ns["out"]
    # The comment in the block: [R], [2], (2, 5), [None, None].
    assert tokens.shape == (4,) and tokens.dtype == np.int32
    assert ((tokens >= 0) & (tokens < 32000)).all()
    assert out.tokens.shape == (2,)
    assert out.top_ids.shape == (2, 5)
    assert list(out.errors) == [None, None]
    # Per-row seeds and positions: the same call repeats its draws exactly.
    again = ns["sp"].top_k_top_p_sampling_from_logits(
        ns["logits"], 50, [0.9, 0.9, 0.5, 1.0], temperature=0.7, seed=[1, 2, 3, 4], positions=[41, 17, 9, 60]
    )
    assert np.array_equal(again, tokens)


def test_readme_torch_cuda_block_runs():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for the README's torch block")
    blocks, ns = run_numpy_block()
    exec(compile(blocks[1], "README.md python block 2", "exec"), ns)
    tokens, out = ns["tokens"], ns["out"]
    assert tokens.is_cuda and tuple(tokens.shape) == (4,)
    assert tuple(out.top_ids.shape) == (2, 5)
    assert [int(s) for s in out.status] == [0, 0]
