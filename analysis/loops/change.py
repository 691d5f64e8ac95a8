"""One change of a step's graph (changes.py applies it): its name, its parameters, and
what each change says, in one sentence (a finding's saving_model)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Change:
    """One change of the graph: its name, what it says, and its parameters."""

    name: str
    windows: tuple[tuple[int, int], ...] = ()        # host_ahead: [start, end) on the clock
    kernels: tuple[tuple[str, float], ...] = ()      # faster_kernels: (name regex, factor)
    pinned_bps: float = 0.0                           # pinned_async: the pinned copy rate
    grids: tuple[int, ...] = ()                      # one_pass: the chains' launch configs
    scope: tuple[tuple[int, int], ...] = ()          # the finding's range; () the whole step
    own_cpu: bool = False                            # host_ahead: the thread's CPU time only
    whole: bool = False                              # no_sync: device syncs go with their call
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def said(self) -> str:
        return CHANGES[self.name]


CHANGES = {
    "no_sync": "the step replayed without the wait: its synchronize calls and blocking "
               "copies end after their own return, not after the GPU work they waited for, "
               "nor wait for the GIL after it",
    "fixed_shape": "the step replayed with its boolean-mask indexing made fixed-shape "
                   "(torch.where): no count read back, no wait, and the kernels that count "
                   "before it (CUB's select and reduce; a sort stays) and select after "
                   "it gone with their dispatch",
    "unique_mask": "the step replayed with torch.unique made a fixed-size mask "
                   "(index_fill_ on a zeroed mask): no count read back, no wait, and its "
                   "sort, its counting and selecting kernels gone with their dispatch",
    "size_given": "the step replayed with the size the library reads back given "
                  "(repeat_interleave(..., output_size=n)): no read back, no wait, and the "
                  "check it runs between its reads gone with their dispatch",
    "no_break": "the step replayed as one compiled graph: no read back between its two "
                "graphs, no sync, no host work resuming the second",
    "no_memory": "the step replayed with the allocator reusing its blocks: memory calls "
                 "take no time, nor the waits to take the GIL back after them, a free no "
                 "longer waits for the GPU, and the allocator's host work beside each "
                 "takes the thread's usual time between calls",
    "host_ahead": "the step replayed with its host work prepared ahead: the CPU time "
                  "between calls in the range's windows gone, its copies asynchronous",
    "one_graph": "the step replayed as one CUDA graph launch: the launch calls and the CPU "
                 "time between them gone, kernels back to back",
    "pinned_async": "the step replayed with its pageable copies pinned and asynchronous: "
                    "the thread no longer waits for them, and they run at the pinned rate",
    "readback_on_device": "the step replayed with its device-to-host readbacks kept on the "
                          "device: the copy, its wait, the read's dispatch and the host "
                          "work on the copy gone",
    "index_on_device": "the step replayed with its index tensor kept on the device: the "
                       "index's copy to the GPU before each indexing, its dispatch and "
                       "the wait for it gone",
    "no_building": "the step replayed without building kernels every call: its module "
                   "loads, plan-building CUDA calls and CPU time between calls gone",
    "faster_kernels": "the step replayed with the named kernels at the speed they can "
                      "reach: what of their time reaches the step's wall",
    "fused": "the step replayed with the kernels fusion removes taking no time: their "
             "work done inside the kernel before them (a GEMM's epilogue, one fused kernel)",
    "no_fill": "the step replayed without its fills of buffers the next operation "
               "overwrites (torch.empty for torch.zeros): the fill kernels and the calls "
               "that launched them take no time",
    "one_cat": "the step replayed with its growing concatenations made as one: of its "
               "concatenation kernels, all but the longest take no time, and so does the "
               "host's dispatch of each (its calls and waits since the launch or blocking "
               "call before)",
    "one_pass": "the step replayed with each chain of elementwise kernels made one fused "
                "kernel: of each chain, its shortest kernel stays (one pass over the "
                "tensor), the others and the host's dispatch of each (its calls and waits, "
                "for the GIL among them, since the launch or blocking call before) take no "
                "time",
    "prefetch": "the step replayed with its host-to-device copies made a step ahead on a "
                "side stream: no wait for them, the copy engine beside the kernels",
    "no_gil": "the step replayed with no other Python thread holding the GIL: its waits "
              "for the GIL take no time",
    "input_ahead": "the step replayed with its next batch ready: the time its thread "
                   "waited for the DataLoader's workers gone",
    "batch_on_device": "the step replayed with its batch built on the GPU: the CPU time "
                       "that built it from Python data (from the launch before its copy "
                       "to the copy) gone, its copies asynchronous",
    "foreach": "the step replayed with its per-tensor ops made as one multi-tensor op "
               "(torch._foreach_*): the CPU time and launches of their line gone, and of "
               "their kernels one left",
    "gpu_fed": "the step replayed with a GPU that never waits for the host: each operation "
               "right after the one before it on its stream (the most a fix of the idle "
               "gaps can give)",
}
