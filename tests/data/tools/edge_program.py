"""A small program whose Nsight Systems trace exercises every attribution rule.

Run on a GPU under nsys (see tests/data/README.md); its export is committed as
tests/data/edge/trace.sqlite. What it does, each on tiny tensors:
- kernels before any range (must be credited to no range);
- a push/pop range `edge` holding nested ranges `outer/inner`, a range `repeat` entered
  three times, a memset and memcpys (GPU ops that count in the span but are not kernels);
- a start/end range `startend` (nvtx.start_range) around kernels;
- a second thread that launches kernels inside its own range `worker` while the main
  thread sits in range `wait` (the worker's kernels must not count in `wait`);
- a CUDA graph replayed inside `graph` (traced per node, its kernels appear);
- two streams overlapping inside `streams`;
- a range in the default domain (torch.cuda.nvtx) `default_domain`.
"""

import threading

import nvtx
import torch

D = nvtx.get_domain("profkit")


def push(name: str) -> None:
    D.push_range(D.get_event_attributes(message=name))


def main() -> None:
    x = torch.randn(1 << 16, device="cuda")
    y = torch.relu(x) + 1  # outside every range
    torch.cuda.synchronize()

    push("edge")
    push("outer")
    y = x * 2
    push("inner")
    y = torch.sin(y)
    y = y + x
    D.pop_range()
    y = torch.cos(y)
    D.pop_range()
    for _ in range(3):
        push("repeat")
        y = x.exp()
        D.pop_range()
    push("copies")
    host = torch.randn(1 << 14)
    dev = host.to("cuda")
    dev.zero_()
    back = dev.cpu()
    D.pop_range()
    torch.cuda.synchronize()

    rng = D.start_range(D.get_event_attributes(message="startend"))
    y = torch.tanh(x)
    y = y * y
    D.end_range(rng)

    def worker() -> None:
        push("worker")
        z = torch.sigmoid(x)
        z = z.abs()
        torch.cuda.synchronize()
        D.pop_range()

    push("wait")
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    y = x.neg()
    D.pop_range()

    static_x = torch.randn(1 << 16, device="cuda")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            static_y = static_x.sin().cos()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        static_y = static_x.sin().cos()
    torch.cuda.synchronize()
    push("graph")
    for _ in range(2):
        g.replay()
    torch.cuda.synchronize()
    D.pop_range()

    push("streams")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    big = torch.randn(1 << 22, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s1):
        a = big.exp()
    with torch.cuda.stream(s2):
        b = big.sin()
    torch.cuda.synchronize()
    D.pop_range()
    D.pop_range()  # edge

    torch.cuda.nvtx.range_push("default_domain")
    y = x.sqrt()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    y = x.abs()  # outside every range
    torch.cuda.synchronize()
    print("edge program done", float(y.sum()), float(static_y.sum()), float(back.sum()),
          float(a.sum() + b.sum()))


if __name__ == "__main__":
    main()
