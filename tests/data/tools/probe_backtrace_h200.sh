#!/bin/bash
# What --python-backtrace=cuda --cudabacktrace=sync records on the H200 (through the
# device tool, after `source .gpu-kit/env.sh`): a small generated battery program under
# nsys with CPU and Python sampling and CUDA backtraces of syncs, exported with its JSON;
# the schema of CUDA_CALLCHAINS and the frames of a few syncs -> $OUT/probe.txt, and the
# export trimmed to those tables -> $OUT/probe.sqlite.xz.
set -u
R=/tmp/probe; rm -rf "$R"; mkdir -p "$R"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nsys profile --trace=cuda,nvtx,osrt --sample=process-tree --python-sampling=true \
  --python-backtrace=cuda --cudabacktrace=sync:1000,memory:1000 --cpuctxsw=none \
  --force-overwrite=true --output="$R/raw" \
  python3 tests/data/tools/battery_gen/program.py --seed ${SEED:-70} --loops ${LOOPS:-6} \
  --steps 8 --rounds 1 --out "$R/truth.json" > "$R/log.txt" 2>&1
nsys export --type=sqlite --include-json=true --force-overwrite=true \
  --output="$R/raw.sqlite" "$R/raw.nsys-rep" >> "$R/log.txt" 2>&1
python3 - "$R/raw.sqlite" > "$OUT/probe.txt" 2>&1 <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
tabs = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
print("tables:", tabs)
for t in tabs:
    if "CALLCHAIN" in t or "BACKTRACE" in t.upper() or "PYTHON" in t.upper():
        print(t, db.execute(f"SELECT sql FROM sqlite_master WHERE name=?", (t,)).fetchone()[0])
        print("rows", db.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
        for row in db.execute(f"SELECT * FROM {t} LIMIT 40"):
            print("  ", row)
print(db.execute("SELECT sql FROM sqlite_master WHERE name='CUPTI_ACTIVITY_KIND_RUNTIME'").fetchone()[0])
try:
    print("event classes", db.execute("SELECT * FROM ENUM_NSYS_EVENT_CLASS").fetchall())
    print("runtime rows by class", db.execute(
        "SELECT eventClass, count(*), count(callchainId) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        "GROUP BY eventClass").fetchall())
    for row in db.execute(
            "SELECT r.eventClass, r.correlationId, r.start, r.end, n.value, r.callchainId "
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId "
            "WHERE r.callchainId IS NOT NULL LIMIT 12"):
        print(" chained", row)
        for f in db.execute("SELECT c.*, s.value, m.value FROM CUDA_CALLCHAINS c "
                            "LEFT JOIN StringIds s ON s.id = c.symbol LEFT JOIN StringIds m "
                            "ON m.id = c.module WHERE c.id = ? ORDER BY c.stackDepth",
                            (row[-1],)):
            print("    ", f)
except sqlite3.Error as e:
    print("classes failed", e)
try:
    q = ("SELECT r.correlationId, n.value, r.callchainId, c.stackDepth, s.value, m.value "
         "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId "
         "JOIN CUDA_CALLCHAINS c ON c.id = r.callchainId LEFT JOIN StringIds s ON s.id = c.symbol "
         "LEFT JOIN StringIds m ON m.id = c.module WHERE n.value LIKE '%Synchronize%' "
         "ORDER BY r.start, c.stackDepth LIMIT 200")
    for row in db.execute(q):
        print(" sync", row)
except sqlite3.Error as e:
    print("join failed", e)
PY
tail -5 "$R/log.txt" >> "$OUT/probe.txt"
python3 - "$R/raw.sqlite" "$R/probe.sqlite" <<'PY'
import sqlite3, sys
src, dst = sys.argv[1], sys.argv[2]
db = sqlite3.connect(src)
db.execute(f"ATTACH '{dst}' AS o")
for t in [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]:
    if t in ("StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA_CALLCHAINS", "ThreadNames",
             "TARGET_INFO_SESSION_START_TIME", "META_DATA_EXPORT") or "CALLCHAIN" in t:
        db.execute(f"CREATE TABLE o.{t} AS SELECT * FROM main.{t}")
db.commit()
PY
xz -9 -T16 "$R/probe.sqlite" && cp "$R/probe.sqlite.xz" "$OUT/" && cp "$R/truth.json" "$OUT/probe_truth.json"
xz -6 -T16 -k "$R/raw.sqlite" && [ "$(stat -c %s "$R/raw.sqlite.xz")" -lt 16000000 ] \
  && cp "$R/raw.sqlite.xz" "$OUT/probe_full.sqlite.xz"
ls -la "$OUT"
