"""Makes tests/data/torch_logs/recompile_guards_cpu.txt (CPU, torch 2.13.0+cpu):

    for m in local cached; do TORCH_LOGS=recompiles python recompile_guards.py $m; done

`local`: a module class defined inside a function, so each instance has a new type (the
type-id guard fails); `cached`: one class, compiled under two backends (BACKEND_MATCH).
"""

import functools
import sys

import torch
import torch.nn as nn


def make(d):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x):
            return torch.relu(self.lin(x))
    return Block()


@functools.cache
def cls():
    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x):
            return torch.relu(self.lin(x))
    return Block


x = torch.randn(4, 8)
for be in ("eager", "aot_eager"):
    torch.compile(make(8) if sys.argv[1] == "local" else cls()(8), backend=be)(x)
