"""A generated battery program: loops drawn from a seed, each with one to three causes of
the catalogue (causes.py) and the fix of each, run in one process, the truth measured
around every variant by its synchronize.

    python program.py --seed 11 [--loops 24] [--steps 16] [--rounds 2 [--max-rounds 8]]
                      [--device cuda] [--out truth.json]
    python program.py --seed 11 --plan         # the drawn loops, as JSON, nothing run

Each loop `gNN` is drawn from the seed: a base step (`gpu`: a chain of GEMMs sized
1-4k, the GPU holds the step; `host`: small kernels launched one by one, the host holds
it), one to three causes (or one negative control, one loop in eight), each with a size
and a layout: its code in a range nested in the step (`step/<cause>`), in a range beside
the step in the same iteration (`<cause>`), or in no range of its own. A loop runs as
variants: `all` (every cause planted), and `fix_<cause>` for each cause (that cause's fix,
the others planted). Variant `v` of loop `gNN` is the range `gNN_v` around its steps,
each step the range `step`, after three warm-up steps outside any range (a pass of all
first: `warm`). With `--rounds R` each variant runs R times, steps / R steps each, the
variants in order and then reversed, round after round, never one variant twice in a row
(`orders`), and up to `--max-rounds` while the savings have not settled (`run`).

Truth (--out): per loop, its draw and each variant's cost per step as it runs (`run`): the
time after the synchronize that follows its last step less the time before its first, over
its steps. The realized saving of fixing cause c is cost(all) - cost(fix_c), in one process.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import nvtx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from causes import BY_NAME, CATALOGUE, Cause, State, gil_stop  # noqa: E402

LAYOUTS = ("nested", "beside", "none")
CONTROL_EVERY = 8


def draw(seed: int, loops: int) -> list[dict]:
    """The loops of a seed: base, causes with size and layout (JSON-able)."""
    out = []
    real = [c.name for c in CATALOGUE if not c.control]
    controls = [c.name for c in CATALOGUE if c.control]
    for i in range(loops):
        rng = random.Random(seed * 1_000 + i)
        control = rng.randrange(CONTROL_EVERY) == 0
        names = [rng.choice(controls)] if control else \
            rng.sample(real, rng.choice((1, 1, 2, 2, 3)))
        out.append({"loop": f"g{i:02d}", "base": rng.choice(("gpu", "host")),
                    "base_size": round(rng.random(), 3),
                    "causes": [{"name": n, "size": round(rng.random(), 3),
                                "layout": rng.choice(LAYOUTS)} for n in names]})
    return out


def base_setup(kind: str, size: float, dev: str) -> State:
    """The step's own work: GEMMs (gpu) or small kernels one by one (host)."""
    if kind == "gpu":
        n = int(1024 + 3072 * size) // 64 * 64
        return {"w": [torch.randn(n, n, device=dev) / n ** 0.5 for _ in range(3)],
                "x": torch.randn(n, n, device=dev)}
    return {"v": torch.randn(4096, device=dev), "k": int(16 + 32 * size)}


def base_step(kind: str, s: State) -> None:
    if kind == "gpu":
        y = s["x"]
        for w in s["w"]:
            y = torch.relu(y @ w)
        s["y"] = y
    else:
        v = s["v"]
        for _ in range(s["k"]):
            v = v * 0.5 + 1.0
        s["y"] = v


def one(c: Cause, state: State, fixed: bool, i: int, name: str | None) -> None:
    """Run a cause (planted or fixed) in step i, in range `name` when given."""
    if name:
        nvtx.push_range(name)
    (c.fixed if fixed else c.planted)(state, i)
    if name:
        nvtx.pop_range()


def step(spec: dict, base: State, states: list[State], fix: str | None, i: int) -> None:
    """One iteration: causes beside the step, then the step (base work, nested causes and
    causes without a range)."""
    causes = [(BY_NAME[c["name"]], c["layout"], st) for c, st in
              zip(spec["causes"], states, strict=True)]
    for c, layout, st in causes:
        if layout == "beside":
            one(c, st, c.name == fix, i, c.name)
    nvtx.push_range("step")
    base_step(spec["base"], base)
    for c, layout, st in causes:
        if layout != "beside":
            one(c, st, c.name == fix, i, c.name if layout == "nested" else None)
    nvtx.pop_range()


def variant(spec: dict, base: State, states: list[State], fix: str | None, steps: int,
            sync: bool) -> float:
    """Warm-up, then `steps` steps in range gNN_<variant>; cost per step (ns)."""
    for i in range(3):
        step(spec, base, states, fix, i)
    if sync:
        torch.cuda.synchronize()
    nvtx.push_range(f"{spec['loop']}_{'fix_' + fix if fix else 'all'}")
    t0 = time.perf_counter_ns()
    for i in range(steps):
        step(spec, base, states, fix, i)
    if sync:
        torch.cuda.synchronize()
    t1 = time.perf_counter_ns()
    nvtx.pop_range()
    for st in states:
        gil_stop(st)
    return (t1 - t0) / steps


def orders(names: list, rounds: int) -> list[list]:
    """The variants' order in each round: in order, then in reverse, round after round,
    so that a drift of the machine's speed through the loop falls on every variant alike;
    where a round would start with the variant the round before ended with, its first
    moves to its end (all, fix_a, fix_b | fix_a, all, fix_b | ...): a variant run twice in
    a row, its warm-up steps between, would make its range a loop of its own whose step
    holds those warm-up steps (seeds 32 to 34, captured before this)."""
    out: list[list] = []
    for r in range(rounds):
        order = list(names) if r % 2 == 0 else list(names[::-1])
        if out and order[0] == out[-1][-1]:
            order = order[1:] + order[:1]
        out.append(order)
    return out


def run(spec: dict, steps: int, dev: str, rounds: int = 1,
        max_rounds: int | None = None) -> dict:
    """Every variant of one loop: the spec with `cost_ns` per variant (the mean over its
    rounds) and `round_cost_ns` (each round's). With `rounds` > 1 the variants run in
    rounds of steps / rounds steps each, in the orders of `orders`; up to `max_rounds`
    (default `rounds`) while a cause's saving has not settled (settled) and the loop's
    extra rounds have taken less than EXTRA_BUDGET_S: a loop whose steps vary by a fifth
    from one to the next (host work beside a GIL holder, a sort of a fresh CPU tensor)
    measures a saving of a tenth of its step only over many steps. The spec's `steps`
    and `rounds` are those run.

    Everything above this function keeps its line numbers: the captures' Python samples
    name its lines (base_step's, variant's synchronize), and the analysis reads the code
    at them; new code goes below."""
    base = base_setup(spec["base"], spec["base_size"], dev)
    states = [BY_NAME[c["name"]].setup(random.Random(c["size"]), c["size"], dev)
              for c in spec["causes"]]
    names = [None] + [c["name"] for c in spec["causes"]]
    cost: dict = {n: [] for n in names}
    per, last = steps // rounds, max(rounds, max_rounds or rounds)
    warm(spec, base, states, names, dev == "cuda")
    extra = 0.0
    for r, order in enumerate(orders(names, last)):
        if r == rounds:
            extra = time.perf_counter()
        if r >= rounds and (settled(cost) or time.perf_counter() - extra > EXTRA_BUDGET_S):
            break
        for fix in order:
            cost[fix].append(variant(spec, base, states, fix, per, dev == "cuda"))
    done = len(cost[None])
    key = {n: "fix_" + n if n else "all" for n in names}
    return {**spec, "rounds": done, "steps": per * done,
            "cost_ns": {key[n]: sum(v) / done for n, v in cost.items()},
            "round_cost_ns": {key[n]: v for n, v in cost.items()}}


from score import band, standard_error  # noqa: E402  (below run: the lines above stay)

EXTRA_BUDGET_S = 6.0
"""The most a loop spends on rounds beyond --rounds (seconds, warm-up steps included)."""
SETTLED = 0.5
"""A cause's saving has settled when the standard error of its per-round mean is within
this share of the ±15% band's half-width (score.py's band: 15% of the saving or 5% of the
loop's cost, whichever is wider): its rounds then agree to the precision it is judged to."""


SETTLED_ROUNDS = 3
"""The fewest rounds whose savings can show they have settled. Two rounds' standard error
is half their difference, an estimate of one degree of freedom that falls below half the
true one four times in ten (|Z| < 0.5): on seed 82, a loop whose input built on its own
thread made its steps vary from 77 to 131 ms judged a 10 ms saving settled on two rounds
(8.5 and 11.7 ms), where its steps' spread allows about 6 ms either way. With three, a
fifth of the time."""


def settled(cost: dict) -> bool:
    """Whether every cause's saving (cost[None] round r less cost[cause] round r) has
    settled (SETTLED), over the rounds run so far (SETTLED_ROUNDS at least)."""
    everything = cost[None]
    if len(everything) < SETTLED_ROUNDS:
        return False
    slack = 0.05 * sum(everything) / len(everything)
    for name, fixed in cost.items():
        if name is None:
            continue
        saved = [a - b for a, b in zip(everything, fixed, strict=True)]
        mean = sum(saved) / len(saved)
        if standard_error(saved) > SETTLED * band(mean, slack):
            return False
    return True


WARM_S = 0.2
"""The least a loop's warm-up pass lasts (seconds) before its first timed round."""


def warm(spec: dict, base: State, states: list[State], names: list, sync: bool) -> None:
    """Before the first round, untimed and in no range of the loop's: three steps of every
    variant, then planted steps until WARM_S has passed (64 at most). Without it the
    loop's first timed variant, `all`, paid for its first steps after the setup: on seeds
    11-75 the first round's savings were on average 1.7% of the loop above the second's
    (the second round runs `all` last)."""
    t0 = time.perf_counter()
    for fix in names:
        for i in range(3):
            step(spec, base, states, fix, i)
        for st in states:
            gil_stop(st)
    for i in range(64):
        if time.perf_counter() - t0 >= WARM_S:
            break
        step(spec, base, states, None, i)
    for st in states:
        gil_stop(st)
    if sync:
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--loops", type=int, default=24)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--device", default="cuda")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the variants in this many rounds, alternately in order and "
                   "reversed (steps must divide by it)")
    p.add_argument("--max-rounds", type=int, default=None,
                   help="run more rounds, up to this many, while a cause's saving has not "
                   "settled (see `settled`; at most EXTRA_BUDGET_S more a loop)")
    p.add_argument("--out", type=Path)
    p.add_argument("--plan", action="store_true", help="print the drawn loops, run nothing")
    a = p.parse_args()
    specs = draw(a.seed, a.loops)
    if a.plan:
        print(json.dumps(specs, indent=1))
        return
    done = []
    for spec in specs:
        done.append(sized(spec, a.steps, a.device, a.rounds, a.max_rounds))
        said = ", ".join(f"{k} {v / 1e6:.3f}" for k, v in done[-1]["cost_ns"].items())
        print(f"{spec['loop']} {spec['base']} "
              f"{'+'.join(c['name'] + ':' + c['layout'] for c in spec['causes'])}: {said} ms",
              flush=True)
    truth = {"seed": a.seed, "steps": a.steps, "device": a.device,
             "torch": torch.__version__, "loops": done}
    if a.out:
        a.out.write_text(json.dumps(truth, indent=1) + "\n")


STEP_BUDGET_S = 0.25
"""A loop's timed steps per variant last about this long at least (sized): a short host
step's saving of a few tens of microseconds repeats round to round only over more steps."""
MAX_SCALE = 4


def scale(per_step_s: float, steps: int) -> int:
    """How many times `steps` a loop runs: enough for STEP_BUDGET_S of timed steps per
    variant, at most MAX_SCALE times."""
    return max(1, min(MAX_SCALE, int(STEP_BUDGET_S / max(per_step_s * steps, 1e-9))))


def sized(spec: dict, steps: int, dev: str, rounds: int,
          max_rounds: int | None = None) -> dict:
    """run() with the loop's steps scaled (scale) from three planted steps timed before
    it; the truth records the loop's own `steps` (every round's)."""
    base = base_setup(spec["base"], spec["base_size"], dev)
    states = [BY_NAME[c["name"]].setup(random.Random(c["size"]), c["size"], dev)
              for c in spec["causes"]]
    per = variant(dict(spec, loop=spec["loop"] + "_probe"), base, states, None, 3,
                  dev == "cuda") / 1e9
    del base, states
    n = steps * scale(per, steps)
    return run(spec, n - n % rounds, dev, rounds, max_rounds)


if __name__ == "__main__":
    main()
