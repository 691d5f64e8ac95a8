"""A remedy in the user's own layer: a kernel came from a torch op (cuBLAS, cuDNN, ATen),
from Inductor (torch.compile's `triton_*` kernels), or from the user's own Triton kernel,
and each is fixed with that layer's knobs: a torch setting, a compile option, or the
kernel's block sizes, `tl.dot` dtype, `num_warps` / `num_stages` (docs/rules.md, "Remedies by
layer" table is REMEDY).

The layer: Inductor by its `triton_poi_` / `_red_` / `_per_` / `_tem_` prefix; the user's
Triton when the variant whose range launched it has the role triton (meta.json), else
when its name ends in `_kernel`; torch for library names (gemm, cuDNN, CUTLASS, nvjet,
ATen) and anything else."""

from __future__ import annotations

import re

from ..documents.types import Meta

TORCH_KERNEL = re.compile(r"gemm|cublas|cudnn|cutlass|xmma|nvjet|at::native|at::|sm\d\d_|"
                          r"flash|fmha|ampere_|hopper_|volta_|cub::|nccl", re.I)
INDUCTOR_KERNEL = re.compile(r"^triton_(poi|red|per|tem)_")
OWN_TRITON = re.compile(r"_kernel$")
LAYERS = ("torch", "inductor", "triton")

REMEDY = {
    ("memory", "torch"): "fuse the chain of torch ops (torch.compile), or use a fused op "
                         "(F.scaled_dot_product_attention, fused optimizers); bf16 autocast "
                         "halves the bytes",
    ("compute", "torch"): "let fp32 matmuls use tensor cores: "
                          "torch.set_float32_matmul_precision('high') (TF32), or run them in "
                          "bf16 under torch.autocast; for attention pick the SDPA backend "
                          "(torch.backends.cuda.enable_flash_sdp / enable_cudnn_sdp)",
    ("latency", "torch"): "too little work per launch: batch the small ops, fuse them with "
                          "torch.compile, or replay them as a CUDA graph",
    ("memory", "inductor"): "an Inductor kernel that moves too many bytes: check what it "
                            "fused (TORCH_LOGS=fusion,output_code), compile under bf16 "
                            "autocast",
    ("compute", "inductor"): "let Inductor autotune its templates: "
                             "torch.compile(mode='max-autotune')",
    ("latency", "inductor"): "torch.compile(mode='max-autotune') for larger tiles, or "
                             "mode='reduce-overhead' to replay the graph",
    ("memory", "triton"): "cut bytes: fuse with neighbours, smaller dtypes, avoid re-reads; "
                          "a larger BLOCK_SIZE for longer coalesced accesses",
    ("compute", "triton"): "use tensor cores: tl.dot on fp16/bf16 inputs (fp32 accumulate); "
                           "tune num_warps and num_stages",
    ("latency", "triton"): "more parallel work in flight: larger tiles per program, more "
                           "programs, more num_stages, fewer dependent loads",
}


def layer(kernel: str, range_path: str | None = None, meta: Meta | None = None) -> str:
    """Which layer a kernel came from (see the module doc)."""
    if INDUCTOR_KERNEL.search(kernel):
        return "inductor"
    if meta and range_path:
        roles = {p: meta.role(v) for v, p in meta.ranges.items()}
        owner = next((r for p, r in roles.items()
                      if range_path == p or range_path.startswith(p + "/")), None)
        if owner == "triton" and not TORCH_KERNEL.search(kernel):
            return "triton"
    if TORCH_KERNEL.search(kernel):
        return "torch"
    return "triton" if OWN_TRITON.search(kernel) else "torch"


GEMM = re.compile(r"gemm|xmma|nvjet|cutlass|cublas", re.I)
TORCH_COMPUTE_NOT_GEMM = ("fuse the chain of torch ops (torch.compile) so fewer instructions "
                          "run per element, or run it under bf16 autocast")


def remedy(bound: str, kernel: str, range_path: str | None = None,
           meta: Meta | None = None) -> str:
    """The remedy for a `bound` kernel, in its own layer (a compute-bound torch kernel
    that is no GEMM is told to fuse, not to change matmul precision)."""
    where = layer(kernel, range_path, meta)
    if (bound, where) == ("compute", "torch") and not GEMM.search(kernel):
        return TORCH_COMPUTE_NOT_GEMM
    return REMEDY[(bound, where)]
