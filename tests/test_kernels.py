"""Triton kernels against torch references: CPU interpreter by default, GPU with -m gpu."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernels.gelu import gelu, gelu_reference  # noqa: E402
from kernels.matmul_relu import matmul_relu, persistent_config, tile_config, tma_compatible  # noqa: E402
from tests.conftest import HAS_CUDA  # noqa: E402

# Without a GPU these run in Triton's CPU interpreter (TRITON_INTERPRET=1, conftest.py);
# with one they run on it, where a float32 tl.dot uses tf32 (rel. error near 3e-4).
DEVICE = "cuda" if HAS_CUDA else "cpu"
DOT_TOL = 2e-3 if HAS_CUDA else 1e-5


def poisoned(fn, out_shape: tuple[int, ...], dtype=torch.float32):
    """fn() after a warm-up call (autotuning writes the output too), with the caching
    allocator's only free block of the output's size filled with NaN: a kernel that skips
    an element leaves a NaN there. Fails if the output did not land in that block."""
    fn()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    poison = torch.full(out_shape, float("nan"), device="cuda", dtype=dtype)
    address = poison.data_ptr()
    del poison
    out = fn()
    assert out.data_ptr() == address, "the output did not reuse the poisoned block"
    return out


def rel_error(out, ref) -> float:
    out64, ref64 = out.double(), ref.double()
    return float(torch.linalg.vector_norm(out64 - ref64) / torch.linalg.vector_norm(ref64))


@pytest.mark.parametrize("n", [1, 1000, 1025, 3 * 1024 + 7])
def test_gelu_small_matches_reference(n: int) -> None:
    x = torch.randn(n, device=DEVICE) * 4                       # reaches |x| > 5.5 where exp(2a) overflows
    y = gelu(x, block_size=256)
    assert torch.isfinite(y).all()
    # elementwise bound: a single element near gelu's zero has no meaningful rel. error
    torch.testing.assert_close(y, gelu_reference(x.double()).float(), rtol=1e-5, atol=1e-6)


def test_gelu_rejects_non_contiguous() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        gelu(torch.randn(8, 8, device=DEVICE).t())


def assert_matmul_relu(out, a, b, tol: float) -> None:
    ref = torch.relu(a.double() @ b.double())
    # scaled absolute bound: relu of a 1 x 5 product may be all zeros (no relative error)
    scale = float(torch.linalg.vector_norm(a.double() @ b.double()))
    assert float(torch.linalg.vector_norm(out.double() - ref)) <= tol * scale


@pytest.mark.parametrize("m, k, n", [(33, 17, 45), (64, 64, 64), (1, 70, 5), (130, 40, 72)])
def test_matmul_relu_tiles_match_reference(m: int, k: int, n: int) -> None:
    a, b = torch.randn(m, k, device=DEVICE), torch.randn(k, n, device=DEVICE)
    assert_matmul_relu(matmul_relu(a, b, tile_config(32, 32, 16, 3, 4)), a, b, DOT_TOL)


# Edges in M, N and K (TMA zero-fills loads and clips stores past them), several tiles per
# program (4 programs in the interpreter), and both epilogues.
@pytest.mark.parametrize("m, k, n", [(64, 64, 64), (130, 40, 72), (33, 20, 200), (1, 8, 4)])
@pytest.mark.parametrize("split", [False, True])
def test_matmul_relu_persistent_matches_reference(m: int, k: int, n: int, split: bool) -> None:
    a, b = torch.randn(m, k, device=DEVICE), torch.randn(k, n, device=DEVICE)
    assert_matmul_relu(matmul_relu(a, b, persistent_config(32, 32, 16, 3, 4, split)), a, b,
                       DOT_TOL)


def test_matmul_relu_tma_needs_aligned_rows() -> None:
    a, b = torch.randn(33, 17, device=DEVICE), torch.randn(17, 45, device=DEVICE)
    assert not tma_compatible(a)                     # 17 floats: a row pitch of 68 bytes
    with pytest.raises(ValueError, match="16-byte aligned"):
        matmul_relu(a, b, persistent=True)
    bt = torch.randn(48, 40, device=DEVICE).t()      # unit stride down columns
    assert not tma_compatible(bt) and tma_compatible(bt.contiguous())
    a = torch.randn(8, 40, device=DEVICE)
    assert_matmul_relu(matmul_relu(a, bt, tile_config(32, 32, 16, 3, 4)), a, bt, DOT_TOL)


def test_matmul_relu_shape_errors() -> None:
    with pytest.raises(ValueError, match="incompatible"):
        matmul_relu(torch.randn(4, 5), torch.randn(4, 5))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1,), (1023,), (4097, 33), (8192, 8191)])
def test_gelu_gpu_odd_sizes(shape: tuple[int, ...]) -> None:
    x = torch.randn(shape, device="cuda") * 3
    y = poisoned(lambda: gelu(x), x.shape)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, gelu_reference(x.double()).float(), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("m, k, n", [(4096, 4096, 4096), (1000, 333, 777), (129, 4095, 67)])
def test_matmul_relu_gpu_fp16(m: int, k: int, n: int) -> None:
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    out = poisoned(lambda: matmul_relu(a, b), (m, n), torch.float16)
    ref = torch.relu(a.double() @ b.double())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert rel_error(out, ref) < 1e-2
    bt = b.t().contiguous().t()                      # not TMA-readable: the pointer kernel
    assert rel_error(matmul_relu(a, bt), ref) < 1e-2


from kernels.add_relu import add_relu  # noqa: E402
from kernels.layernorm import layernorm, layernorm_naive  # noqa: E402
from kernels.row_sum import row_sum  # noqa: E402
from kernels.softmax import softmax, softmax_naive  # noqa: E402

ODD_ROWS = [(1, 1), (7, 100), (33, 1000)]


@pytest.mark.parametrize("shape", [(1,), (1000,), (33, 65)])
def test_add_relu_matches(shape: tuple[int, ...]) -> None:
    x, y = torch.randn(shape, device=DEVICE), torch.randn(shape, device=DEVICE)
    torch.testing.assert_close(add_relu(x, y, block_size=256), torch.relu(x + y))


@pytest.mark.parametrize("m, n", ODD_ROWS)
def test_softmax_matches(m: int, n: int) -> None:
    x = torch.randn(m, n, device=DEVICE) * 5
    ref = torch.softmax(x.double(), dim=1).float()
    torch.testing.assert_close(softmax(x), ref)
    torch.testing.assert_close(softmax(x, programs=3), ref)    # persistent row loop
    torch.testing.assert_close(softmax_naive(x), ref)


@pytest.mark.parametrize("m, n, block", [(1, 1, 16), (5, 10_000, 1024), (3, 4097, 4096)])
def test_row_sum_matches(m: int, n: int, block: int) -> None:
    x = torch.randn(m, n, device=DEVICE)
    torch.testing.assert_close(row_sum(x, block_size=block), x.double().sum(1).float(),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m, n", ODD_ROWS)
def test_layernorm_matches(m: int, n: int) -> None:
    x = torch.randn(m, n, device=DEVICE) * 3 + 1
    w, b = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double()).float()
    torch.testing.assert_close(layernorm(x, w, b), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(layernorm_naive(x, w, b), ref, rtol=1e-4, atol=1e-4)


def test_row_kernels_reject_bad_layouts() -> None:
    x = torch.randn(8, 8, device=DEVICE).t()
    for fn in (softmax, row_sum):
        with pytest.raises(ValueError, match="contiguous rows"):
            fn(x)
    with pytest.raises(ValueError, match="one value per column"):
        layernorm(torch.randn(4, 8, device=DEVICE), torch.randn(7, device=DEVICE),
                  torch.randn(8, device=DEVICE))
    with pytest.raises(ValueError, match="contiguous"):
        add_relu(x, x)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", [(1, 1), (4097, 1000), (65536, 1024), (3, 32768)])
def test_row_kernels_gpu_large_and_odd(m: int, n: int) -> None:
    x = torch.randn(m, n, device="cuda")
    torch.testing.assert_close(poisoned(lambda: softmax(x), (m, n)),
                               torch.softmax(x.double(), 1).float())
    torch.testing.assert_close(row_sum(x), x.double().sum(1).float(), rtol=1e-4, atol=1e-2)
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    if n <= 16384:
        torch.testing.assert_close(layernorm(x, w, b), torch.nn.functional.layer_norm(
            x.double(), (n,), w.double(), b.double()).float(), rtol=1e-4, atol=1e-4)
    y = torch.randn(m, n, device="cuda")
    torch.testing.assert_close(add_relu(x, y), torch.relu(x + y))


from kernels.attention import attention, attention_config, attention_naive  # noqa: E402


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("s, d", [(1, 16), (70, 16), (129, 32)])
def test_attention_matches_sdpa(causal: bool, s: int, d: int) -> None:
    q, k, v = (torch.randn(1, 2, s, d, device=DEVICE) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                           is_causal=causal).float()
    tol = 2e-3 if HAS_CUDA else 1e-5            # tf32 dots on the GPU
    for config in (attention_config(32, 16, 3, 4), attention_config(16, 16, 3, 4)):
        torch.testing.assert_close(attention(q, k, v, causal, config), ref, rtol=tol, atol=tol)
    torch.testing.assert_close(attention_naive(q, k, v, causal), ref, rtol=tol, atol=tol)


def test_attention_rejects_bad_inputs() -> None:
    q = torch.randn(1, 1, 8, 24, device=DEVICE)
    with pytest.raises(ValueError, match="head_dim 24"):
        attention(q, q, q)
    with pytest.raises(ValueError, match="batch, heads, seq"):
        attention(q[0], q[0], q[0])
    with pytest.raises(ValueError, match="must divide"):
        attention_config(64, 48, 3, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(4, 16, 4096, 128), (2, 3, 1000, 64), (1, 1, 1, 128)])
def test_attention_gpu_fp16(causal: bool, shape: tuple[int, ...]) -> None:
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    out = poisoned(lambda: attention(q, k, v, causal), shape, torch.float16)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           is_causal=causal)
    assert torch.isfinite(out).all()
    assert rel_error(out, ref) < 1e-2
