"""Hand-written Triton kernels, one module per op: `<op>_kernel` plus a launcher `<op>()`.

Kernels know nothing of profiling; workloads in `workflows.workloads` call the launchers.
"""
