#!/usr/bin/env python3
"""bench/peaks.py: bench/peak_fma's output read into numbers (bench/run.py uses parse), and checked.

    python3 bench/peaks.py --check build/bench/peak_fma     # ctest bench_peak: exit 0 pass, 1 fail

--check runs peak_fma briefly (0.1 s a measurement, best of 3) and fails where its measurement is wrong in an
obvious way:
  - a line that does not parse, or a peak missing: fp32 and each dot-product unit (VDPBF16PS,
    TDPBF16PS, VPDPBUSD, TDPBUSD) once, on 1 thread and on every core, or "not available (why)";
  - a unit measured where /proc/cpuinfo lacks its flag (avx512_bf16, amx_bf16, avx512_vnni,
    amx_int8), or said "not available" where the flag is there, unless the operating system does not
    enable the unit's registers or refused AMX's tile registers (the reason says so);
  - a peak per core at or below 0, or above twice what any CPU does at 6 GHz (the kernel optimised
    away, or its operations miscounted upwards);
  - a unit far below the fp32 FMA peak of the same run (its operations miscounted downwards, or too
    few accumulators): AMX-BF16 below 4x, AMX-INT8 below 8x, AVX512-VNNI below 0.5x, AVX512-BF16
    below 0.2x.  The bars are loose because the true ratios differ by CPU: a 2-core Sapphire Rapids
    VM measured VDPBF16PS at half its FMA peak (one every two cycles against two FMAs a cycle), the
    AMX units at about 15x and 30x, VPDPBUSD at 4x; gemm_bench put VDPBF16PS GEMMs at 1.3-1.9x
    the FMA peak on a Zen 5.  So a bf16 peak below the fp32 one is no error in itself.  On a shared
    machine one measurement can land low: these ratios are checked on up to three runs and fail only
    when every run fails them.
The bars are per core on 1 thread (the all-core numbers move with whatever else runs).
"""
import os
import re
import subprocess
import sys

# The dot-product units, in peak_fma's order: (unit as peak_fma names it, feature, /proc/cpuinfo flag).
DOT_UNITS = [("bf16 VDPBF16PS", "AVX512-BF16", "avx512_bf16"), ("bf16 TDPBF16PS", "AMX-BF16", "amx_bf16"),
             ("int8 VPDPBUSD", "AVX512-VNNI", "avx512_vnni"), ("int8 TDPBUSD", "AMX-INT8", "amx_int8")]
UNITS = ["fp32"] + [u for u, _, _ in DOT_UNITS]
# The most operations a core does a cycle on each unit (2 FMAs of 16 floats; 2 dot-product
# instructions of 16 lanes; a 16x16x32 bf16 or 16x16x64 int8 tile product every 16 cycles).
MAX_OPS_PER_CYCLE = {"fp32": 64, "bf16 VDPBF16PS": 128, "int8 VPDPBUSD": 256, "bf16 TDPBF16PS": 1024,
                     "int8 TDPBUSD": 2048}
MIN_VS_FP32 = {"bf16 VDPBF16PS": 0.2, "int8 VPDPBUSD": 0.5, "bf16 TDPBF16PS": 4.0, "int8 TDPBUSD": 8.0}

HOST = re.compile(r"^host .*, (\d+) cores online$")
VALUE = re.compile(r"^peak (fp32|bf16 \w+|int8 \w+), (\d+) threads?:\s+([\d.]+) (GFLOP/s|GOP/s) (?:per core|total, .*)$")
NOT_AVAILABLE = re.compile(r"^peak (bf16 \w+|int8 \w+): not available \((.*)\)$")


def parse(text):
    """peak_fma's output as {unit: {threads: GFLOP/s or GOP/s in all}} and {unit: why not available},
    the cores online, and the lines that did not parse."""
    values, why, cores, bad = {}, {}, None, []
    for line in text.splitlines():
        m = HOST.match(line)
        if m:
            cores = int(m.group(1))
            continue
        m = VALUE.match(line)
        if m:
            values.setdefault(m.group(1), {})[int(m.group(2))] = float(m.group(3))
            continue
        m = NOT_AVAILABLE.match(line)
        if m:
            why[m.group(1)] = m.group(2)
            continue
        bad.append(line)
    return values, why, cores, bad


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def check_once(exe, flags):
    """(problems that fail at once, ratios below their bar, the output)."""
    r = subprocess.run([exe, "0.1"], capture_output=True, text=True)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        return [f"peak_fma exited {r.returncode}"], [], out
    values, why, cores, bad = parse(r.stdout)
    problems = [f"a line that does not parse: {line!r}" for line in bad]
    if not cores:
        problems.append("no 'host ..., N cores online' line")
        cores = 1
    for unit in UNITS:
        threads = sorted({1, cores})
        if unit in values and unit in why:
            problems.append(f"{unit}: both measured and not available")
        elif unit in values:
            problems += [f"{unit}: no {t}-thread peak" for t in threads if t not in values[unit]]
        elif unit not in why:
            problems.append(f"{unit}: neither measured nor said not available")
    for unit, feature, flag in DOT_UNITS:
        if flags is None:
            break
        if flag in flags and unit in why and "refused" not in why[unit] and "the OS" not in why[unit]:
            problems.append(f"{unit}: not available ({why[unit]}), but /proc/cpuinfo has {flag}")
        if flag not in flags and unit in values:
            problems.append(f"{unit}: measured, but /proc/cpuinfo has no {flag}")
    low = []
    fp32 = values.get("fp32", {}).get(1)
    for unit in UNITS:
        v = values.get(unit, {}).get(1)
        if v is None:
            continue
        ceiling = 2 * MAX_OPS_PER_CYCLE[unit] * 6.0
        if not 0 < v <= ceiling:
            problems.append(f"{unit}: {v:g} per core on 1 thread, outside (0, {ceiling:g}]")
        if unit in MIN_VS_FP32 and fp32 and v < MIN_VS_FP32[unit] * fp32:
            low.append(f"{unit}: {v:g} per core, {v / fp32:.2f}x the fp32 FMA peak ({fp32:g}), below "
                       f"{MIN_VS_FP32[unit]}x")
    return problems, low, out


def check(exe):
    if not os.access(exe, os.X_OK):
        print(f"{exe} is missing: build it first")
        return 1
    flags = cpu_flags()
    for attempt in range(1, 4):
        problems, low, out = check_once(exe, flags)
        print(f"-- run {attempt}:\n{out.rstrip()}")
        for p in problems + low:
            print("FAIL:", p)
        if problems:
            return 1
        if not low:
            print("peak_fma's output parses, every unit is measured where the CPU has it and said not available "
                  "where not, and each peak lies within its bounds")
            return 0
        print("(a ratio below its bar: measured again, as a busy machine can land one measurement low)")
    return 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
    sys.exit(2)
