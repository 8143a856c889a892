#!/usr/bin/env python3
"""test_cli_bench.py: `vitc bench MODEL.so`, the throughput and latency benchmark.

- About 1 s of the example model with 2 requests at a time (--json): the JSON
  parses; its counts are consistent (requests = the sum over the contexts,
  every context ran, images = requests x batch, requests/s and images/s =
  requests and images over the duration, which is at least the time asked);
  min <= p50 <= p90 <= p99 <= max and min <= mean <= max; the inputs are the
  model's at the batch asked.
- --requests N runs exactly N requests among the contexts; --batch is the
  images per request; the text output says the same.
- A model whose export fixed the batch runs that batch by default, another
  refused naming it; a CUDA model where no GPU is usable fails with the
  runtime's message (exit 2), or runs where one is.
- Bad command lines: exit 2 with one message naming what is wrong, and the
  usage hint where the command line itself is wrong.
Needs only the Python standard library.  Run by ctest with VITC_BIN and
VITC_SOURCE_DIR set.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
VITC = os.environ.get("VITC_BIN", "vitc")
EXAMPLE = os.path.join(SRC, "examples", "vit-tiny.onnx")
FIXED = os.path.join(SRC, "tests", "data", "fixed-batch-1.onnx")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def vitc(*args):
    return subprocess.run([VITC, *args], capture_output=True, text=True)


def bench_json(*args):
    p = vitc("bench", *args, "--json")
    if p.returncode != 0:
        sys.exit(f"vitc bench {' '.join(args)} --json exited {p.returncode}:\n{p.stderr}")
    return json.loads(p.stdout)


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def check_consistent(r, what):
    lat = r["latency"]
    check(r["requests"] == sum(r["requests_per_context"]) and len(r["requests_per_context"]) == r["concurrency"],
          f"{what}: requests {r['requests']} = the sum over the contexts {r['requests_per_context']}")
    check(r["images"] == r["requests"] * r["batch"], f"{what}: images {r['images']} = requests x batch {r['batch']}")
    check(r["duration_s"] > 0 and close(r["requests_per_s"], r["requests"] / r["duration_s"]),
          f"{what}: requests/s {r['requests_per_s']} = {r['requests']} / {r['duration_s']} s")
    check(close(r["images_per_s"], r["images"] / r["duration_s"]),
          f"{what}: images/s {r['images_per_s']} = {r['images']} / {r['duration_s']} s")
    order = [lat[k] for k in ("min_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms")]
    check(all(math.isfinite(v) and v > 0 for v in order) and order == sorted(order),
          f"{what}: min <= p50 <= p90 <= p99 <= max: {order}")
    check(lat["min_ms"] <= lat["mean_ms"] <= lat["max_ms"], f"{what}: min <= mean <= max")
    # requests run back to back on each context: its latencies fit in the duration
    check(lat["max_ms"] <= 1e3 * r["duration_s"] * (1 + 1e-6), f"{what}: max latency within the duration")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        so = os.path.join(tmp, "tiny.so")
        subprocess.run([VITC, EXAMPLE, "-o", so, "--batch", "4", "--quiet"], check=True)

        # ~1 s, 2 requests at a time, batch 2, 1 thread each
        r = bench_json(so, "--time", "1", "--concurrency", "2", "--batch", "2", "--threads", "1", "--seed", "7")
        check((r["model"], r["target"], r["batch"], r["concurrency"], r["threads"], r["seed"], r["limit"]) ==
              (so, "cpu", 2, 2, 1, 7, {"time_s": 1}), f"settings as asked: {r['limit']}, threads {r['threads']}")
        check(r["inputs"] == [{"name": "input", "dtype": "float32", "shape": [2, 3, 32, 32]}],
              f"inputs at the batch: {r['inputs']}")
        check(r["warmup_requests"] == 1, "one warm-up request per context by default")
        check_consistent(r, "--time 1 --concurrency 2")
        check(all(n >= 1 for n in r["requests_per_context"]), "every context ran requests")
        check(1.0 <= r["duration_s"] < 1.0 + 1e-3 * r["latency"]["max_ms"] + 0.5,
              f"the duration ({r['duration_s']:.3f} s) is the time asked, and the requests under way then")
        print(f"     {r['requests']} requests in {r['duration_s']:.3f} s: {r['requests_per_s']:.1f} requests/s, "
              f"p50 {r['latency']['p50_ms']:.3f} ms, p99 {r['latency']['p99_ms']:.3f} ms")

        # a count of requests, shared among 3 contexts
        r = bench_json(so, "--requests", "7", "--concurrency", "3", "--batch", "4", "--warmup", "0")
        check(r["requests"] == 7 and r["images"] == 28 and r["limit"] == {"requests": 7},
              f"--requests 7: {r['requests']} requests, {r['images']} images")
        check(r["warmup_requests"] == 0, "--warmup 0")
        check_consistent(r, "--requests 7 --concurrency 3")

        # the text output
        p = vitc("bench", so, "--requests", "5", "--concurrency", "2")
        check(p.returncode == 0 and "5 requests (5 images)" in p.stdout and "requests/s" in p.stdout
              and "images/s" in p.stdout and "p99" in p.stdout and "2 requests at a time" in p.stdout,
              f"text output: {p.stdout!r}")

        # a fixed batch: that batch by default, another refused naming it
        fixed = os.path.join(tmp, "fixed.so")
        subprocess.run([VITC, "compile", FIXED, "-o", fixed, "--quiet"], check=True, capture_output=True)
        r = bench_json(fixed, "--requests", "2")
        check(r["batch"] == 1 and r["requests"] == 2, "a model with a fixed batch runs it by default")
        p = vitc("bench", fixed, "--batch", "2")
        check(p.returncode == 2 and p.stderr == f"vitc: bench: --batch 2: {fixed} runs batch 1 only\n",
              f"another batch refused: {p.stderr!r}")

        # a CUDA model: runs where a GPU is usable, else the runtime's message, exit 2
        version = vitc("--version").stdout
        if "--target cuda: NVRTC" in version:
            cu = os.path.join(tmp, "tiny-cuda.so")
            subprocess.run([VITC, EXAMPLE, "-o", cu, "--target", "cuda", "--batch", "4", "--quiet"], check=True)
            p = vitc("bench", cu, "--requests", "4", "--concurrency", "2", "--json")
            if p.returncode == 0:
                r = json.loads(p.stdout)
                check(r["target"] == "cuda" and r["requests"] == 4, "a CUDA model on this machine's GPU")
                check_consistent(r, "CUDA --requests 4 --concurrency 2")
            else:
                check(p.returncode == 2 and p.stderr.startswith(f"vitc: {cu}: ") and "CUDA" in p.stderr
                      and len(p.stderr.splitlines()) == 1,
                      f"a CUDA model without a usable GPU: exit {p.returncode}, {p.stderr.strip()!r}")
        else:
            print("     (no CUDA backend in this vitc: the CUDA case is not run)")

        # bad command lines: exit 2, one message, the usage hint where the command line is wrong
        hint = "(run 'vitc bench --help' for usage)\n"
        cases = [
            ([], "vitc: bench: no model given\n" + hint),
            ([so, "--concurrency", "0"], "vitc: bench: --concurrency takes a whole number from 1 to 256, not '0'\n" + hint),
            ([so, "--time", "0"], "vitc: bench: --time takes seconds, a number above 0 and up to 86400, not '0'\n" + hint),
            ([so, "--time", "1s"], "vitc: bench: --time takes seconds, a number above 0 and up to 86400, not '1s'\n" + hint),
            ([so, "--time", "1", "--requests", "3"],
             "vitc: bench: --time and --requests do not go together (one says when to stop)\n" + hint),
            ([so, "--requests", "-1"], "vitc: bench: --requests takes a whole number from 1 to 1000000000, not '-1'\n" + hint),
            ([so, "--threads", "x"], "vitc: bench: --threads takes a whole number from 0 to 1024, not 'x'\n" + hint),
            ([so, "--batch", "9"], f"vitc: bench: --batch 9: {so} runs batches 1 to 4\n"),
            ([so, "--concurency", "2"], "vitc: bench: unknown option '--concurency'; did you mean --concurrency?\n" + hint),
            ([so, "--bisect"], "vitc: bench: --bisect is an option of 'vitc compare', not of 'vitc bench'\n" + hint),
            ([EXAMPLE], f"vitc: bench: '{EXAMPLE}' is an ONNX model; bench runs compiled ones "
                        f"(vitc compile {EXAMPLE} -o MODEL.so)\n" + hint),
            ([os.path.join(tmp, "missing.so")], None),
        ]
        for args, want in cases:
            p = vitc("bench", *args)
            ok = p.returncode == 2 and p.stdout == "" and (p.stderr == want if want else
                                                            p.stderr.startswith("vitc: ") and "missing.so" in p.stderr)
            check(ok, f"vitc bench {' '.join(args)}: exit {p.returncode}, {p.stderr.strip()!r}")
        p = vitc("bnech", so)
        check(p.returncode == 2 and "did you mean 'bench'?" in p.stderr, "a misspelt 'bench' gets the nearest command")
        p = vitc("bench", "--help")
        check(p.returncode == 0 and p.stdout.startswith("usage:\n  vitc bench MODEL.so") and "--concurrency N" in p.stdout,
              "vitc bench --help")

    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
