"""Dynamo guard failures, said in one short line with the fix that fits them.

A recompile's TORCH_LOGS record names the guard that failed, in Dynamo's own words:
"0/0: tensor 'x' size mismatch at index 0. expected 8, actual 16", or
"0/0: ___check_type_id(self, 363219184), type=<class 'm.f.<locals>.Block'>  # source ...",
"0/0: BACKEND_MATCH failure: torch.compile detected different backend callables. ...".
The second form drags a source excerpt along and reads badly in a report. `explain` keeps
what a user acts on (which value changed, and how) and picks the suggestion for that kind
of guard; the full text stays in the finding's evidence.
"""

from __future__ import annotations

import re

_FRAME = re.compile(r"^\d+/\d+:\s*")
_TYPE_ID = re.compile(r"___check_type_id\((?P<name>[^,()]+),[^)]*\)"
                      r"(?:,\s*type=<class '(?P<cls>[^']+)'>)?")
_OBJ_ID = re.compile(r"___check_obj_id\((?P<name>[^,()]+),")
_BACKEND = re.compile(r"BACKEND_MATCH failure.*?compiler='(?P<old>[^']*)'.*?"
                      r"compiler='(?P<new>[^']*)'")
_ITEM = re.compile(r"\.item\(\)\s*==\s*(?P<value>\S+)")
_MAX = 160

SHAPE_FIX = ("keep shapes and dtypes stable across calls, or mark the varying dimension "
             "dynamic (torch._dynamo.mark_dynamic / dynamic=True)")
SAME_TYPE_FIX = "pass the same class each call"
TYPE_FIX = (f"{SAME_TYPE_FIX}: a class defined inside a function is a new type every time it "
            "runs; define it once at module level")
OBJ_FIX = ("pass the same object each call (Dynamo guards on its identity), or make the "
           "varying object a tensor argument")
BACKEND_FIX = ("expected when one process compiles the same function in two modes or "
               "backends (variants side by side); otherwise call torch.compile once and reuse "
               "the compiled module")
ITEM_FIX = ("keep the value a tensor instead of calling .item() (Dynamo guards on the Python "
            "number), or set torch._dynamo.config.capture_scalar_outputs = True")


def explain(reason: str | None) -> tuple[str, str]:
    """(short reason, suggestion) for a logged guard failure; ("", SHAPE_FIX) when none."""
    text = _FRAME.sub("", (reason or "").strip())
    if m := _TYPE_ID.search(text):
        cls = m["cls"] or ""
        fix = TYPE_FIX if "<locals>" in cls else SAME_TYPE_FIX
        said = f" (compiled for {cls})" if cls else ""
        return f"{m['name'].strip()!r} is a different type than when compiled{said}", fix
    if m := _OBJ_ID.search(text):
        return f"{m['name'].strip()!r} is a different object than when compiled", OBJ_FIX
    if m := _BACKEND.search(text):
        return (f"compiled again for another backend or mode ({m['old']}, then "
                f"{m['new']})", BACKEND_FIX)
    if m := _ITEM.search(text):
        return (f"a Python number read with .item() changed (guarded value "
                f"{m['value']})", ITEM_FIX)
    short = text.split("  # ", 1)[0].strip()
    return (short if len(short) <= _MAX else short[:_MAX - 1] + "…"), SHAPE_FIX
