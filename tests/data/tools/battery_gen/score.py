"""How well the findings price the generated battery: each cause of each loop against
what fixing it saved in the same process (program.py's truth).

    python score.py CAPTURE_DIR [-o TABLE.md] [--report DIR]

CAPTURE_DIR holds trace.sqlite and truth.json; the systems report is made into --report
(default CAPTURE_DIR/report) unless its systems.json is there. Per cause of loop gNN:
realized = cost(all) - cost(fix_<cause>) per step; priced = the largest saving per step
of the findings on the loop's ranges (gNN_all/...) whose rule names that cause
(causes.py) and that name no line, or a line of the function that plants it (`about`),
0 where none; where one rule's remedy is the cause's fix (FIX_RULE), that rule's
findings where it has some (another rule's remedy is another fix, not measured). A cause is within ±15% when |priced - realized| is at most 15%
of the realized or 5% of the loop's cost, within ±50% likewise. A negative control
passes when no finding on its loop saves more than 5% of the loop's cost (BASE_RULES: the
findings that name the base step, not the control, are left out). A cause whose rule
the base step shows too, run without a range of its own (an fp32 GEMM in a `gpu` loop's
step), is priced by its share of the step's finding: that finding's saving in the
planted variant less its saving in the variant that fixes the cause (base_share).

A capture run in rounds (program.py --rounds R, R >= 2) measures each cause's saving R
times: round r's is its `all` range's r-th instance less its `fix_<cause>` range's, per
step, read from the trace's NVTX ranges (the program opens each around its timed steps).
Where the standard error of their mean is wider than the ±15% band's half-width (for two
rounds: where they differ by more than the band's width), the truth
itself does not repeat to that precision (the machine drifted between rounds): the row
says so (`repeats`: no) and the table gives the share within ±15% both over every cause
and over those whose truth repeats. It also counts the causes within ±50% once the band
is widened by that standard error (two rounds: half their spread): a price outside ±50%
of the mean but within the rounds' own disagreement is judged by a truth that does not hold still
(a loop with a periodic checkpoint whose one slow save falls in one round).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from causes import BY_NAME  # noqa: E402

BASE_RULES = {"host": ("launch_bound", "host_bound", "unfused_elementwise"),
              "gpu": ("fp32_gemm",)}
"""What a base step is by construction: `host`, small elementwise kernels launched one by
one (`v = v * 0.5 + 1.0`, a chain one fused kernel would make); `gpu`, a chain of fp32
GEMMs (TF32 off, PyTorch's default): a control's loop is judged on the findings other
than these, which name the base, the same in every variant."""


FIX_RULE = {"blocking_upload": "pageable_copy", "adam_single": "per_tensor_ops",
            "small_ops": "per_tensor_ops"}
"""Where a cause's rules give different remedies, the one whose remedy its fix applies (a
pinned non_blocking copy is pageable_copy's; copy_on_compute_stream's is a prefetch on a
side stream, which the program does not run; the fused optimizer is per_tensor_ops's,
a rule the cause's list in causes.py predates, so it counts among its rules here; one
`torch._foreach_mul_` for a loop of `p.mul_` is per_tensor_ops's too, where launch_bound's
remedy is a CUDA graph of the same launches). Kept
here, not in causes.py: the captures' Python samples name causes.py's lines, and the
analysis reads the code at those lines, so that file's lines must not move."""


def about(f: dict, cause) -> bool:
    """Whether a finding is about the cause by its lines: it names none (the rule alone
    says), or one in the function that plants the cause (a finding of the same rule on
    the base step's line is about the base)."""
    named = (f.get("evidence") or {}).get("lines_named") or []
    return not named or any(x.get("function") == cause.planted.__name__ for x in named)


def own_range(fits: list[dict], cause) -> list[dict]:
    """For a cause the base step shows too (its rule is one of BASE_RULES), the findings
    on the cause's own range (its `beside` or `nested` layout runs it in a range of its
    name) where there are some: a finding of the same rule on the loop or its step is
    about the base's work there as well (the fp32 GEMMs of a `gpu` base step)."""
    own = [f for f in fits if on_own_range(f, cause)]
    return own or fits


def on_own_range(f: dict, cause) -> bool:
    """Whether the finding's range is the cause's own (a range of its name below the
    variant's)."""
    return cause.name in (f.get("range") or "").split("/")[1:]


def base_share(fits: list[dict], found: list[dict], cause: str, base: tuple[str, ...],
               steps: int) -> float:
    """The cause's price where its findings may name the base step's work too (a `gpu`
    loop's fp32_gemm on its step, where the cause's GEMM has no range of its own): a
    finding of a rule in `base` counts its saving in the planted variant less the same
    finding's (rule, range and launch configuration) in the variant that fixes
    the cause, which leaves the base's work as it is (the battery's fix makes the
    cause's GEMM TF32, the finding's remedy every GEMM of the step); others count whole."""
    def key(f: dict, range_: str) -> tuple:
        ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
        return f["rule"], range_, ev.get("grid")
    twins = {key(f, f.get("range") or ""): f.get("saving_ns", 0.0) for f in found}
    out = 0.0
    for f in fits:
        saved = f.get("saving_ns", 0.0)
        if f["rule"] in base:
            head, *rest = (f.get("range") or "").split("/")
            saved -= twins.get(key(f, "/".join([head.replace("_all", f"_fix_{cause}"),
                                                *rest])), 0.0)
        out = max(out, saved / steps)
    return out


OTHER_FIXES = {"unique": ("kernelHistogram1D", "torch.bincount")}
"""Fixes the battery once ran that are not the remedy the findings price, by cause: the
kernel that tells them in the trace and the call. Captures before torch.unique's remedy
became a fixed-size mask (index_fill_; seeds 11-44) fixed it by `torch.bincount(y,
minlength=n) > 0`, which reads its size back itself (its input's min and max: two waits
a step), so what that fix saved is not what the remedy saves. Such a row stays in the
table, marked, and the counts are given without it too."""


def other_fixes(trace: Path) -> set[tuple[str, str]]:
    """(loop, cause) whose fix variant (a gNN_fix_<cause> range) launched the kernel of
    a fix OTHER_FIXES names, from the range's own thread."""
    found = set()
    with sqlite3.connect(f"file:{trace}?mode=ro", uri=True) as db:
        for cause, (kernel, _) in OTHER_FIXES.items():
            calls = db.execute(
                "SELECT r.globalTid, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.shortName JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                "ON r.correlationId = k.correlationId WHERE s.value = ?", (kernel,)).fetchall()
            if not calls:
                continue
            ranges = db.execute(
                "SELECT COALESCE(e.text, s.value), e.globalTid, e.start, e.end FROM "
                "NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE "
                "COALESCE(e.text, s.value) LIKE ? AND e.end IS NOT NULL",
                (f"g%_fix_{cause}",)).fetchall()
            found |= {(name.split("_")[0], cause) for name, tid, lo, hi in ranges
                      if any(t == tid and lo <= at <= hi for t, at in calls)}
    return found


def findings(report: Path) -> list[dict]:
    return json.loads((report / "systems.json").read_text()).get("findings", [])


def round_costs(trace: Path, steps_per_round: int | dict[str, int]
                ) -> dict[str, list[float]]:
    """Each variant range's (gNN_<variant>) cost per step in each of its instances, in
    the order they ran (ns): the range's duration over its steps (per loop gNN where a
    dict gives them: program.py sizes each loop's steps)."""
    with sqlite3.connect(f"file:{trace}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT COALESCE(e.text, s.value), e.end - e.start FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.end IS NOT NULL "
            "ORDER BY e.start").fetchall()
    out: dict[str, list[float]] = {}
    for name, ns in rows:
        if name and len(name) > 4 and name[0] == "g" and name[1:3].isdigit() and "_" in name:
            per = steps_per_round if isinstance(steps_per_round, int) else \
                steps_per_round.get(name.split("_")[0])
            if per:
                out.setdefault(name, []).append(ns / per)
    return out


def loop_steps(truth: dict, spec: dict) -> int:
    """A loop's timed steps per variant: its own (program.py sizes them), else the
    capture's (seeds captured before the sizing)."""
    return int(spec.get("steps", truth["steps"]))


def round_savings(per_round: dict[str, list[float]], loop: str, cause: str) -> list[float]:
    """The cause's saving per step measured round by round (ns): its `all` instance less
    its fix's, round after round (none where the capture has one round)."""
    a, b = per_round.get(f"{loop}_all", []), per_round.get(f"{loop}_fix_{cause}", [])
    saved = [x - y for x, y in zip(a, b, strict=False)]
    return saved if len(saved) >= 2 else []


def repeats(per_round: dict[str, list[float]], loop: str, cause: str, slack: float) -> bool:
    """Whether the cause's saving measured round by round holds still to the ±15% band:
    the standard error of its mean within the band's half-width (two rounds: they differ
    by at most the band's width; see the module doc); True where the capture has one
    round."""
    saved = round_savings(per_round, loop, cause)
    if not saved:
        return True
    return standard_error(saved) <= band(sum(saved) / len(saved), slack)


def spread(per_round: dict[str, list[float]], loop: str, cause: str) -> float:
    """The standard error of the cause's mean saving over its rounds (ns; half their
    range for two rounds, 0 with one): how far the truth itself moves between rounds. A
    price outside ±50% of the mean by no more than this is outside it by the truth's own
    noise (`within50_rounds`)."""
    saved = round_savings(per_round, loop, cause)
    return standard_error(saved) if saved else 0.0


def standard_error(values: list[float]) -> float:
    """The standard error of the values' mean (sample deviation over sqrt(n)): for two
    values, half their difference."""
    n = len(values)
    mean = sum(values) / n
    return (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5


def band(realized: float, slack: float, share: float = 0.15) -> float:
    """The half-width of the band a price must fall in: `share` of the realized saving,
    or the slack (5% of the loop) where that is wider."""
    return max(share * abs(realized), slack)


def within(priced: float, realized: float, slack: float, control: bool, share: float,
           widen: float = 0.0) -> bool:
    """Whether a cause's price is within `share` of its realized saving (band), the band
    widened by `widen`; a negative control's, whether it prices no more than the slack."""
    if control:
        return priced <= slack
    return abs(priced - realized) <= band(realized, slack, share) + widen


def score(truth: dict, found: list[dict], per_round: dict[str, list[float]] | None = None,
          other: Collection[tuple[str, str]] = ()) -> list[dict]:
    """One row per cause of each loop (`per_round`: round_costs, where read; `other`:
    other_fixes, the rows whose fix is not the remedy priced)."""
    rows = []
    for spec in truth["loops"]:
        steps = loop_steps(truth, spec)
        cost = spec["cost_ns"]
        loop = f"{spec['loop']}_all"
        mine = [f for f in found if (f.get("range") or "").split("/")[0] == loop]
        for c in spec["causes"]:
            cause = BY_NAME[c["name"]]
            realized = cost["all"] - cost["fix_" + c["name"]]
            shared = False
            if cause.control:              # the base step's own findings name the base
                fits = [f for f in mine if f["rule"] not in BASE_RULES[spec["base"]]]
            else:
                rules = set(cause.rules) | {FIX_RULE.get(c["name"])}
                fits = [f for f in mine if f["rule"] in rules and about(f, cause)]
                fixed = [f for f in fits if f["rule"] == FIX_RULE.get(c["name"])]
                shared = not fixed and set(cause.rules) & set(BASE_RULES[spec["base"]])
                if shared:
                    fits = own_range(fits, cause)
                fits = fixed or fits
            priced = max((f.get("saving_ns", 0.0) / steps for f in fits), default=0.0)
            if shared and not any(on_own_range(f, cause) for f in fits):
                priced = base_share(fits, found, c["name"], BASE_RULES[spec["base"]], steps)
            slack = 0.05 * cost["all"]
            rows.append({
                "loop": spec["loop"], "base": spec["base"], "cause": c["name"],
                "layout": c["layout"], "control": cause.control,
                "loop_ms": cost["all"] / 1e6, "realized_ms": realized / 1e6,
                "priced_ms": priced / 1e6,
                "rounds_ms": [x / 1e6 for x in round_savings(per_round or {}, spec["loop"],
                                                             c["name"])],
                "rules": sorted({f["rule"] for f in fits}),
                "other_fix": OTHER_FIXES[c["name"]][1]
                if (spec["loop"], c["name"]) in other else "",
                "repeats": repeats(per_round or {}, spec["loop"], c["name"], slack),
                "within15": within(priced, realized, slack, cause.control, 0.15),
                "within50": within(priced, realized, slack, cause.control, 0.5),
                "within50_rounds": within(priced, realized, slack, cause.control, 0.5,
                                          spread(per_round or {}, spec["loop"], c["name"]))})
    return rows


def table(rows: list[dict], title: str) -> str:
    real = [r for r in rows if not r["control"]]
    ctl = [r for r in rows if r["control"]]
    n15 = sum(r["within15"] for r in real)
    n50 = sum(r["within50"] for r in real)
    rep = [r for r in real if r["repeats"]]
    head = [f"# {title}", "",
            f"Causes within ±15% (or 5% of the loop): {n15} of {len(real)}; within ±50%: "
            f"{n50} of {len(real)}; negative controls with no finding over 5% of the loop: "
            f"{sum(r['within15'] for r in ctl)} of {len(ctl)}.", "",
            f"Causes whose truth repeats (its rounds agree within the ±15% band): "
            f"{len(rep)} of {len(real)}; of those, within ±15%: "
            f"{sum(r['within15'] for r in rep)}.", "",
            f"Causes within ±50% widened by the standard error of their rounds' savings (the "
            f"truth's own noise): {sum(r['within50_rounds'] for r in real)} of {len(real)}.",
            "", *_without_other_fixes(real),
            "| loop | base | cause | layout | loop ms/step | realized ms | priced ms | rules "
            "| repeats | ±15% | ±50% | rounds ms | ±50%, rounds |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    body = [f"| {r['loop']} | {r['base']} | {_cause_cell(r)}"
            f" | {r['layout']} | {r['loop_ms']:.3f} | {r['realized_ms']:.3f} | "
            f"{r['priced_ms']:.3f} | {', '.join(r['rules']) or '–'} | "
            f"{_yes(r['repeats'])} | {_yes(r['within15'])} | {_yes(r['within50'])} | "
            f"{', '.join(f'{x:.3f}' for x in r['rounds_ms']) or '–'} | "
            f"{_yes(r['within50_rounds'])} |"
            for r in rows]
    return "\n".join(head + body) + "\n"


def _cause_cell(r: dict) -> str:
    if r["control"]:
        return f"{r['cause']} (control)"
    return f"{r['cause']} (fixed by {r['other_fix']})" if r.get("other_fix") else r["cause"]


def _without_other_fixes(real: list[dict]) -> list[str]:
    """The headline's counts without the rows whose fix is not the remedy priced
    (OTHER_FIXES), where there are some."""
    other = [r for r in real if r.get("other_fix")]
    if not other:
        return []
    kept = [r for r in real if not r.get("other_fix")]
    rep = [r for r in kept if r["repeats"]]
    return [f"Causes whose fix is not the remedy priced (marked `fixed by`: OTHER_FIXES in "
            f"score.py): {len(other)}. Without them, within ±15%: "
            f"{sum(r['within15'] for r in kept)} of {len(kept)}; of those whose truth "
            f"repeats, {sum(r['within15'] for r in rep)} of {len(rep)}; within ±50%: "
            f"{sum(r['within50'] for r in kept)} of {len(kept)}.", ""]


def _yes(b: bool) -> str:
    return "yes" if b else "no"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("capture", type=Path)
    p.add_argument("-o", "--output", type=Path)
    p.add_argument("--report", type=Path)
    a = p.parse_args()
    report = a.report or a.capture / "report"
    if not (report / "systems.json").exists():
        subprocess.run([sys.executable, "-m", "analysis", "systems",
                        str(a.capture / "trace.sqlite"), "-o", str(report), "--quiet"],
                       check=True)
    truth = json.loads((a.capture / "truth.json").read_text())
    rows = score(truth, findings(report), round_costs(
        a.capture / "trace.sqlite", {spec["loop"]: loop_steps(truth, spec) // int(
            spec.get("rounds", 1)) for spec in truth["loops"]}),
        other_fixes(a.capture / "trace.sqlite"))
    env = next((p for p in (a.capture / "env.txt", a.capture.parent / "env.txt")
                if p.exists()), a.capture / "env.txt")     # a seed's own machine first
    made = "; ".join(x.strip() for x in env.read_text().splitlines()[:3]) if env.exists() \
        else f"torch {truth['torch']}"
    text = table(rows, f"Generated battery, seed {truth['seed']}") \
        .replace("\n\n", f"\n\nCaptured on: {made}.\n\n", 1)
    if a.output:
        a.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
