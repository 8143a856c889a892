#!/usr/bin/env python3
"""test_zoo: every export of tests/zoo/zoo.tsv through vitc, against PyTorch.

For each export: it imports and compiles (vitc MODEL -o MODEL.so --batch 3),
runs at batch 1 and 3 within 1e-4 of PyTorch's output (max |out - ref| /
max |ref|), and its optimised graph (vitc dump --stage optimized --stats) has
one Attention per block and no Softmax, Erf, Sigmoid, Pow, Sqrt or IsNaN left
outside fused ops.  Exports listed in known-failures.tsv must fail at the
stage named there (the test fails if one passes: the list stays honest).
With --table, prints the README's zoo table instead of asserting.

Run by ctest with VITC_BIN and VITC_SOURCE_DIR set; needs numpy.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

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


def check(f, model, blocks, tmp):
    """(stage reached, detail): stage is 'pass' or where it stopped."""
    path = os.path.join(ZOO, f)
    so = os.path.join(tmp, f + ".so")
    rc, out = vitc(path, "-o", so, "--batch", "3")
    if rc != 0:
        return "compile", out.strip().splitlines()[0] if out.strip() else "exit %d" % rc
    worst = 0.0
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
        if y.shape != ref.shape:
            return "accuracy", "shape %s, PyTorch %s" % (y.shape, ref.shape)
        worst = max(worst, float(np.abs(y - ref).max() / np.abs(ref).max()))
    if worst > 1e-4:
        return "accuracy", "error %.2e > 1e-4" % worst
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
