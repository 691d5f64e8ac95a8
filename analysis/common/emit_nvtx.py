"""What PyTorch's emit_nvtx writes in an op range's name (`aten::linear, seq = 474,
op_id = 11, sizes = [...]`): the marks the loader reads the op and its seq by (in SQL,
load/prefetch.py) and trace/ops.py links forward and backward by. Standard library only:
the loader's first query is built before numpy is imported."""

OP_ID = ", op_id = "
"""What every emit_nvtx op range's name holds after the op (its `op_id` field)."""

SEQ = ", seq = "
"""Before the sequence number a forward op and its backward node share."""

WRAPPER = "autograd::engine::evaluate_function"
"""The wrapper range around a backward node (its node's own range holds the same
kernels)."""
