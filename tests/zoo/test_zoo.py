#!/usr/bin/env python3
"""test_zoo: every export of tests/zoo/zoo.tsv through vitc, against PyTorch.

For each export: it imports and compiles (vitc MODEL -o MODEL.so --batch 3),
runs at batch 1 and 3 within 1e-4 of PyTorch's output (max |out - ref| /
max |ref|), and its optimised graph (vitc dump --stage optimized --stats) has
one Attention per block and no Softmax, Erf, Sigmoid, Pow, Sqrt or IsNaN left
outside fused ops.  Exports listed in known-failures.tsv must fail at the
stage named there (the test fails if one passes: the list stays honest).
With --table, prints the zoo table of docs/models.md instead of asserting.  A NaN or
infinite output, or an all-zero reference, fails the export (rel_error);
--self-test checks rel_error on hand-made arrays (ctest: test_zoo_selftest).

Run by ctest with VITC_BIN and VITC_SOURCE_DIR set; needs numpy.
"""
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:  # the Python references are missing: ctest reports it skipped (77)
    print("skipped: %s: %s (run ./setup.sh, or configure with -DVITC_PYTHON=...)" % (sys.executable, e))
    sys.exit(77)

SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
VITC = os.environ.get("VITC_BIN", "vitc")
ZOO = os.environ.get("VITC_ZOO") or os.path.join(SRC, "tests", "zoo")  # VITC_ZOO: gen_zoo.py --full output
LEFT_OUT = ("Softmax", "Erf", "Sigmoid", "Pow", "Sqrt", "IsNaN")


def rows(name):
    path = os.path.join(ZOO, name)
    if not os.path.exists(path) and name == "known-failures.tsv":  # a --full directory has none
        return []
    with open(path) as f:
        return [l.rstrip("\n").split("\t") for l in f if l.strip() and not l.startswith("#")]


def vitc(*args):
    p = subprocess.run([VITC, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def unexplained_candidates(path):
    """Nodes of the optimised graph that a fusion would have taken (LEFT_OUT's
    ops: a Softmax, Erf, Sigmoid, ... left over) that `--explain-fusion` does
    not account for, as "OP 'node'".  A leftover is accounted for when it, or
    a node at most 6 producers above it, is named by the explanation: a
    LayerNorm's Pow and Sqrt are explained at its anchor, the ReduceMean."""
    rc, text = vitc("dump", path, "--stage", "optimized")
    rc2, explain = vitc("dump", path, "--explain-fusion")
    named = set(re.findall(r"node '([^']*)'", explain))
    nodes = {}  # output value -> (op, node name, input values)
    for line in text.splitlines():
        m = re.match(r"(\S+): \S+ = (\w+)\((.*?)\)(?: .*)?  # ([^(]*?)(?: \(.*)?$", line)
        if m:
            nodes[m.group(1)] = (m.group(2), m.group(4), [a.strip() for a in m.group(3).split(",")])
    missing = []
    for out, (op, name, _) in nodes.items():
        if op not in LEFT_OUT:
            continue
        seen, frontier, found = set(), [out], False
        for _ in range(7):
            found = any(nodes[v][1] in named for v in frontier if v in nodes)
            if found:
                break
            frontier = [i for v in frontier if v in nodes for i in nodes[v][2] if i not in seen]
            seen.update(frontier)
        if not found:
            missing.append("%s '%s'" % (op, name))
    return missing


def rel_error(y, ref):
    """(max |y - ref| / max |ref|, None), or (None, why) when that number would
    not mean anything: NaN or infinite values in the output or the reference,
    or an all-zero reference (nothing to divide by).  Never NaN: Python's
    max(0.0, nan) is 0.0, so a NaN error would pass unnoticed."""
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    bad = np.count_nonzero(~np.isfinite(ref))
    if bad:
        return None, "reference has %d NaN or infinite value(s)" % bad
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    if scale == 0.0:
        return None, "reference is all zero (%d values): no relative error" % ref.size
    bad = np.count_nonzero(~np.isfinite(y))
    if bad:
        return None, "output has %d NaN or infinite value(s) of %d" % (bad, y.size)
    return float(np.abs(y - ref).max()) / scale, None


def accuracy(outputs):
    """(worst error, None) if every (batch, output, PyTorch's output) of
    outputs is within 1e-4, else (None, why)."""
    worst = 0.0
    for b, y, ref in outputs:
        if y.shape != ref.shape:
            return None, "shape %s, PyTorch %s" % (y.shape, ref.shape)
        e, why = rel_error(y, ref)
        if why:
            return None, "batch %d: %s" % (b, why)
        worst = max(worst, e)
    if not worst <= 1e-4:
        return None, "error %.2e > 1e-4" % worst
    return worst, None


def self_test():
    """rel_error and accuracy (check()'s verdict) on hand-made arrays: a NaN
    or infinite output, an all-zero reference and an error over 1e-4 fail; a
    right answer passes.  1 if any verdict is wrong."""
    ref = np.array([[1.0, -2.0], [0.5, 4.0]], np.float32)
    cases = [
        ("equal", ref.copy(), ref, 0.0),
        ("off by 5e-5 of max |ref| 4", ref + np.float32(2e-4), ref, 5e-5),
        ("off by 4e-4 of max |ref| 4", ref + np.float32(1.6e-3), ref, 4e-4),
        ("NaN output", np.where(ref > 0, np.nan, ref).astype(np.float32), ref, None),
        ("one NaN", np.array([[1.0, -2.0], [np.nan, 4.0]], np.float32), ref, None),
        ("infinite output", np.array([[np.inf, -2.0], [0.5, 4.0]], np.float32), ref, None),
        ("all-zero reference", ref, np.zeros_like(ref), None),
        ("NaN reference", ref, np.array([[np.nan, 0, 0, 0]], np.float32).reshape(2, 2), None),
    ]
    bad = 0
    for name, y, r, want in cases:
        e, why = rel_error(y, r)
        ok = (why is not None and e is None) if want is None else (why is None and abs(e - want) <= 0.01 * want)
        print("%-28s error %-10s %-50s %s" % (name, "%.3g" % e if e is not None else "-", why or "", "ok" if ok else "WRONG"))
        bad += not ok
    # check()'s verdict, as for an export whose batch 1 is right and batch 3 is not.
    for name, y, r, want in cases:
        worst, why = accuracy([(1, ref, ref), (3, y, r)])
        ok = (worst is not None) == (want is not None and want <= 1e-4)
        print("accuracy(): %-28s %-10s %s" % (name, "pass" if worst is not None else "fail", "ok" if ok else "WRONG"))
        bad += not ok
    print("%d self-test check(s) wrong" % bad)
    return 1 if bad else 0


def check(f, model, blocks, tmp):
    """(stage reached, detail): stage is 'pass' or where it stopped."""
    path = os.path.join(ZOO, f)
    so = os.path.join(tmp, f + ".so")
    rc, out = vitc(path, "-o", so, "--batch", "3")
    if rc != 0:
        return "compile", out.strip().splitlines()[0].replace(path, f) if out.strip() else "exit %d" % rc
    outputs = []
    for b in (1, 3):
        od = os.path.join(tmp, "%s.b%d" % (f, b))
        os.makedirs(od, exist_ok=True)
        rc, out = vitc("run", so, "--input", os.path.join(ZOO, "%s.b%d.input.npy" % (model, b)), "--output-dir", od)
        if rc != 0:
            return "run", out.strip()
        got = [n for n in os.listdir(od) if n.endswith(".npy")]
        if len(got) != 1:
            return "run", "%d outputs, expected 1" % len(got)
        y = np.load(os.path.join(od, got[0]))
        ref = np.load(os.path.join(ZOO, "%s.b%d.output.npy" % (model, b)))
        outputs.append((b, y, ref))
    worst, why = accuracy(outputs)
    if why:
        return "accuracy", why
    rc, out = vitc("dump", path, "--stage", "optimized", "--stats")
    stats = dict((l.split()[0], int(l.split()[1])) for l in out.splitlines() if len(l.split()) == 2)
    left = ["%s %d" % (op, stats[op]) for op in LEFT_OUT if stats.get(op, 0)]
    unexplained = unexplained_candidates(path)
    if unexplained:
        return "explain", "--explain-fusion does not name " + ", ".join(unexplained)
    if stats.get("Attention", 0) != blocks or left:
        return "fusion", "Attention %d of %d blocks%s" % (stats.get("Attention", 0), blocks,
                                                         "; left: " + ", ".join(left) if left else "")
    return "pass", "error %.1e, %s" % (worst, ", ".join("%s %d" % kv for kv in sorted(stats.items())
                                                        if kv[0] in ("Attention", "Linear", "LayerNormalization")))


def main():
    if "--self-test" in sys.argv:
        return self_test()
    known = {r[0]: r[1] for r in rows("known-failures.tsv")}
    results = []
    with tempfile.TemporaryDirectory(prefix="vitc-zoo-") as tmp:
        for f, model, exporter, blocks in rows("zoo.tsv"):
            stage, detail = check(f, model, int(blocks), tmp)
            results.append((f, model, exporter, stage, detail))
    if "--table" in sys.argv:
        print("| export | exporter | result | detail |\n|---|---|---|---|")
        for f, model, exporter, stage, detail in results:
            print("| `%s` | %s | %s | %s |" % (f, exporter, "PASS" if stage == "pass" else "fails at " + stage,
                                            detail.replace("|", "/")))
        return 0
    bad = 0
    for f, model, exporter, stage, detail in results:
        want = known.get(f, "pass")
        verdict = "ok" if stage == want else "WRONG"
        if stage != want:
            bad += 1
            detail += " (expected: %s)" % ("pass" if want == "pass" else "failure at " + want + ", known-failures.tsv")
        print("%-32s %-8s %-9s %s" % (f, verdict, stage, detail))
    print("%d exports, %d as expected, %d known failures" % (len(results), len(results) - bad, len(known)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
