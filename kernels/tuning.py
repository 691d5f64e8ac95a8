"""What the launchers share about configs: explicit configs bypass autotuning the same way
on the GPU and in the CPU interpreter."""

from __future__ import annotations

import torch
import triton


def launch_options(config: triton.Config, device: torch.device) -> dict:
    """A config's meta-parameters as launch keywords; warps and stages only on the GPU
    (they mean nothing to the CPU interpreter, which is given the meta-parameters alone)."""
    if device.type == "cpu":
        return dict(config.kwargs)
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def sm_count(device: torch.device) -> int:
    """Programs of a persistent grid: one per SM; a few in the CPU interpreter, so its
    tests still walk the persistent loop more than once."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4
