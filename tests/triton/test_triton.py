#!/usr/bin/env python3
"""test_triton.py: vitc models served by Triton Inference Server through the
vitc backend (libtriton_vitc.so), checked with Triton's own clients.

Fixtures of tests/models are compiled by this build's vitc and laid out in a
model repository by vitc.triton (python/vitc/triton.py, imported from the
source tree); the tritonserver that nvidia-pytriton ships is started on
127.0.0.1 on free ports with --backend-directory=BUILD/backends, in explicit
model control mode.  Then:

- outputs over HTTP and gRPC equal to `vitc run` on the same .so and inputs
  (batch 1 and 3), for a full config.pbtxt, for a config.pbtxt of `backend:
  "vitc"` alone (the backend completes it from the .so: max_batch_size,
  inputs, outputs, dynamic batching) and for a model whose export fixed its
  batch (max_batch_size 0, dims with the batch);
- configurations that do not fit the .so are refused, the model unavailable
  with the backend's message (wrong dims, dtype, tensor name, a
  max_batch_size above the .so's, a bad threads parameter, a file that is not
  a vitc model, a CUDA model in a KIND_CPU instance) while the rest load;
- bad requests (shape, dtype, a batch above the limit, a missing or unknown
  input, an unknown output) are answered with errors, by Triton or by the
  backend (a model whose dims are all -1 leaves the checks to it), and the
  server keeps serving: a good request after each is answered right;
- a bounded load test: 16 concurrent gRPC clients for 30 s on the face ViT
  (VITC_TRITON_LOAD_S, VITC_TRITON_CLIENTS, VITC_TRITON_LOAD_MODEL=timm|face
  change it), every answer checked, throughput and p50/p99 latency printed
  beside `vitc bench` on the same .so (batch 1 and 8), the dynamic batcher
  seen to gather requests (inferences per execution above 1);
- a model reloaded while clients keep sending: model.so replaced (renamed
  over) by another model and reloaded, then a version 2 added and loaded,
  every answer one of the two models' and none an error; a model.so
  rewritten in place while loaded refused, the loaded one still serving;
- the metrics endpoint counts the successes; the server stops cleanly
  (SIGTERM, exit 0) and the backend logs each model unloaded.

Exit 0: passed; 1: a check failed; 77: skipped (the server cannot start
here), saying why.  Run by tests/triton/test_triton.sh in its venv.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def skip(why):
    print(f"test_triton skipped: {why}", flush=True)
    sys.exit(77)


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Server:
    """tritonserver on 127.0.0.1, its output in a log file."""

    def __init__(self, binary, repo, backends, log, extra=()):
        self.http, self.grpc, self.metrics = free_ports(3)
        self.log_path = log
        self.cmd = [binary, f"--model-repository={repo}", f"--backend-directory={backends}",
                    "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
                    f"--http-port={self.http}", f"--grpc-port={self.grpc}", f"--metrics-port={self.metrics}",
                    "--exit-timeout-secs=20", *extra]
        self.proc = None

    def start(self, timeout=90):
        self.logf = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/health/live", timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.25)
        return False

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.logf.close()
        return self.proc.returncode


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def rel_err(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


# A request run alone runs at its own batch, as `vitc run` does: the same bits.  One the dynamic
# batcher gathers with others runs in a larger batch, whose GEMMs block the rows otherwise: the
# same within fp32 rounding (1.3e-6 of the largest output at most on these models).
BATCHED_BAR = 1e-5


def close(y, r):
    return y.shape == r.shape and rel_err(y, r) <= BATCHED_BAR


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    build, src = os.path.abspath(args.build), os.path.abspath(args.source)
    vitc = os.path.join(build, "vitc")
    backends = os.path.join(build, "backends")
    sys.path.insert(0, os.path.join(src, "python"))
    import vitc.triton as vt  # the source tree's helper; its signature comes from this build's vitc

    import pytriton
    import tritonclient.grpc as tg
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException

    tserver = os.path.join(os.path.dirname(pytriton.__file__), "tritonserver", "bin", "tritonserver")
    if not os.access(tserver, os.X_OK):
        skip(f"nvidia-pytriton has no tritonserver at {tserver}")
    load_s = float(os.environ.get("VITC_TRITON_LOAD_S", "30"))
    nclients = int(os.environ.get("VITC_TRITON_CLIENTS", "16"))
    load_model = os.environ.get("VITC_TRITON_LOAD_MODEL", "face")
    t_start = time.time()
    work = tempfile.mkdtemp(prefix="vitc-triton-")
    keep = False
    server = None
    try:
        # ---- the server can start here at all (no model: the backend is not loaded yet) ----
        empty = os.path.join(work, "empty")
        os.makedirs(empty)
        pre = Server(tserver, empty, backends, os.path.join(work, "preflight.log"))
        if not pre.start():
            pre.stop()
            keep = True
            skip(f"tritonserver does not start on this machine (log: {pre.log_path}):\n" + pre.log()[-2000:])
        pre.stop()

        # ---- models and references ----
        models = os.path.join(src, "tests", "models")
        so = {}
        for name, onnx, extra in [("timm", "timm-ts17.onnx", ["--batch", "8"]),
                                  ("tv", "torchvision-ts17.onnx", ["--batch", "8"]),
                                  ("face", "face_ln-ts17.onnx", ["--batch", "8"])]:
            so[name] = os.path.join(work, name + ".so")
            run([vitc, os.path.join(models, onnx), "-o", so[name], "--quiet", *extra])
        so["fixed1"] = os.path.join(work, "fixed1.so")
        run([vitc, os.path.join(src, "tests", "data", "fixed-batch-1.onnx"), "-o", so["fixed1"], "--quiet"])
        cuda_so = os.path.join(work, "timm_cuda.so")
        cuda_ok = subprocess.run([vitc, os.path.join(models, "timm-ts17.onnx"), "-o", cuda_so, "--target", "cuda",
                                  "--quiet"], capture_output=True, text=True)
        if cuda_ok.returncode != 0:
            print("note: no CUDA model (vitc --target cuda: " + cuda_ok.stderr.strip().splitlines()[-1] + ")")

        x = {"b1": np.load(os.path.join(models, "timm.b1.input.npy")),
             "b3": np.load(os.path.join(models, "timm.b3.input.npy")),
             "face1": np.load(os.path.join(models, "face_ln.b1.input.npy")),
             "fixed": np.random.default_rng(0).standard_normal((1, 4, 6)).astype(np.float32)}
        ref = {}

        def vitc_run(key, model, xin):
            path = os.path.join(work, f"{key}.npy")
            np.save(path, xin)
            out = os.path.join(work, "ref-" + key)
            run([vitc, "run", so[model], "--input", path, "--output-dir", out])
            names = [f for f in os.listdir(out) if f.endswith(".npy")]
            assert len(names) == 1, names
            ref[key] = np.load(os.path.join(out, names[0]))
        for key, model, xin in [("timm1", "timm", x["b1"]), ("timm3", "timm", x["b3"]), ("tv3", "tv", x["b3"]),
                                ("face1", "face", x["face1"]), ("fixed", "fixed1", x["fixed"])]:
            vitc_run(key, model, xin)
        fixed_in = vt._inspect(so["fixed1"], vitc)["inputs"][0]["name"]

        # ---- the repository ----
        repo = os.path.join(work, "repo")

        def write(model, name, **kw):
            return vt.write_model_repository(so[model], repo, name, vitc_cli=vitc, **kw)
        write("timm", "timm", instances=2, max_queue_delay_us=2000)
        write("face", "face", instances=1, max_queue_delay_us=2000)
        write("timm", "swap", max_queue_delay_us=500)

        def raw(name, text, model="timm", file="model.so"):
            d = os.path.join(repo, name)
            os.makedirs(os.path.join(d, "1"), exist_ok=True)
            if model:
                shutil.copyfile(so[model] if model in so else model, os.path.join(d, "1", file))
            with open(os.path.join(d, "config.pbtxt"), "w") as f:
                f.write(text)
        raw("timm_min", 'backend: "vitc"\n')
        raw("fixed1", 'backend: "vitc"\n', model="fixed1")
        raw("timm_loose", 'backend: "vitc"\nmax_batch_size: 0\n'
            'input [ { name: "input", data_type: TYPE_FP32, dims: [ -1, -1, -1, -1 ] } ]\n'
            'output [ { name: "output", data_type: TYPE_FP32, dims: [ -1, 10 ] } ]\n')
        io = ('input [ { name: "%s", data_type: %s, dims: [ %s ] } ]\n'
              'output [ { name: "output", data_type: TYPE_FP32, dims: [ 10 ] } ]\n')
        bad = {  # name: (config, model file, what the backend must say)
            "bad_dims": ('backend: "vitc"\nmax_batch_size: 8\n' + io % ("input", "TYPE_FP32", "3, 32, 31"), "timm",
                         "config.pbtxt gives input 'input' dims [3,32,31]; the model has [3,32,32]"),
            "bad_dtype": ('backend: "vitc"\nmax_batch_size: 8\n' + io % ("input", "TYPE_INT64", "3, 32, 32"), "timm",
                          "data_type TYPE_INT64; the model takes TYPE_FP32"),
            "bad_name": ('backend: "vitc"\nmax_batch_size: 8\n' + io % ("pixels", "TYPE_FP32", "3, 32, 32"), "timm",
                         "lists input 'pixels', which"),
            "bad_batch": ('backend: "vitc"\nmax_batch_size: 16\n', "timm", "runs batches up to 8"),
            "bad_threads": ('backend: "vitc"\nparameters { key: "threads" value: { string_value: "lots" } }\n',
                            "timm", "parameter threads is 'lots'"),
            "bad_fixed": ('backend: "vitc"\nmax_batch_size: 4\n', "fixed1", "runs batch 1 only"),
        }
        for name, (cfg, model, _) in bad.items():
            raw(name, cfg, model)
        notvitc = os.path.join(work, "notvitc.so")
        with open(notvitc, "w") as f:
            f.write("not a model\n")
        raw("bad_file", 'backend: "vitc"\n', model=notvitc)
        bad["bad_file"] = (None, None, "model.so")
        if cuda_ok.returncode == 0:
            raw("bad_cuda_cpu", 'backend: "vitc"\n', model=cuda_so)  # no instance_group: the backend's KIND_CPU
            bad["bad_cuda_cpu"] = (None, None, "is a CUDA model: give it instance_group [ { kind: KIND_GPU } ]")
        with open(os.path.join(repo, "timm", "config.pbtxt")) as f:
            print("config.pbtxt written by vitc.triton:\n  " + f.read().strip().replace("\n", "\n  "))

        # ---- the server ----
        server = Server(tserver, repo, backends, os.path.join(work, "server.log"),
                        ["--model-control-mode=explicit", "--load-model=*", "--exit-on-error=false",
                         "--strict-readiness=false", "--log-verbose=1"])
        t0 = time.time()
        up = server.start()
        if not check(up, f"tritonserver with the vitc backend starts ({time.time() - t0:.1f} s)"):
            keep = True
            print(server.log()[-4000:])
            return 1
        http = th.InferenceServerClient(f"127.0.0.1:{server.http}")
        grpc = tg.InferenceServerClient(f"127.0.0.1:{server.grpc}")
        index = {m["name"]: m for m in http.get_model_repository_index()}

        for name in ["timm", "timm_min", "fixed1", "timm_loose", "face", "swap"]:
            check(http.is_model_ready(name), f"model {name} is ready")
        for name, (_, _, want) in bad.items():
            m = index.get(name, {})
            check(m.get("state") == "UNAVAILABLE" and want in m.get("reason", ""),
                  f"{name} refused: {m.get('reason', '(no reason)')!r} has {want!r}")

        def infer_http(model, arr, name="input", out="output", dtype=None):
            i = th.InferInput(name, list(arr.shape), dtype or "FP32")
            i.set_data_from_numpy(arr)
            return http.infer(model, [i], outputs=[th.InferRequestedOutput(out)]).as_numpy(out)

        def infer_grpc(model, arr, name="input", out="output", client=None):
            i = tg.InferInput(name, list(arr.shape), "FP32")
            i.set_data_from_numpy(arr)
            return (client or grpc).infer(model, [i], outputs=[tg.InferRequestedOutput(out)]).as_numpy(out)

        # ---- outputs against `vitc run` ----
        for model in ["timm", "timm_min", "timm_loose"]:
            for proto, fn in [("HTTP", infer_http), ("gRPC", infer_grpc)]:
                for b, key in [("b1", "timm1"), ("b3", "timm3")]:
                    y = fn(model, x[b])
                    check(y.shape == ref[key].shape and np.array_equal(y, ref[key]),
                          f"{model} over {proto}, batch {x[b].shape[0]}: equal to vitc run "
                          f"(max rel diff {rel_err(y, ref[key]):.1e})")
        y = infer_http("fixed1", x["fixed"], name=fixed_in, out=http.get_model_metadata("fixed1")["outputs"][0]["name"])
        check(np.array_equal(y, ref["fixed"]), "fixed1 (export fixed the batch at 1) over HTTP: equal to vitc run")
        y = infer_grpc("face", x["face1"])
        check(np.array_equal(y, ref["face1"]), f"face over gRPC: equal to vitc run (max rel diff "
              f"{rel_err(y, ref['face1']):.1e})")

        cfg = http.get_model_config("timm_min")
        check(cfg.get("max_batch_size") == 8 and cfg["input"][0]["dims"] == [3, 32, 32]
              and cfg["input"][0]["data_type"] == "TYPE_FP32" and cfg["output"][0]["dims"] == [10]
              and "dynamic_batching" in cfg and cfg["instance_group"][0]["kind"] == "KIND_CPU",
              "timm_min (config.pbtxt: backend \"vitc\" alone) completed from the .so: max_batch_size 8, "
              "input [3,32,32], output [10], dynamic batching, KIND_CPU")
        cfg = http.get_model_config("fixed1")
        check(cfg.get("max_batch_size") == 0 and cfg["input"][0]["dims"] == [1, 4, 6] and "dynamic_batching" not in cfg,
              f"fixed1 completed as max_batch_size 0, input dims {cfg['input'][0]['dims']} (with the batch)")

        # ---- bad requests: errors, and the server keeps serving ----
        def expect_error(what, fn, want):
            try:
                fn()
                check(False, f"{what}: answered with an error")
            except InferenceServerException as e:
                check(want in str(e), f"{what}: error {str(e)[:160]!r}")
            y = infer_http("timm", x["b1"])
            check(np.array_equal(y, ref["timm1"]), f"  then a good request is answered right")

        def send_http(model, arr, name="input", dtype="FP32", outs=("output",), inputs=True):
            i = th.InferInput(name, list(arr.shape), dtype)
            i.set_data_from_numpy(arr)
            return http.infer(model, [i] if inputs else [], outputs=[th.InferRequestedOutput(o) for o in outs])

        z = np.zeros((1, 3, 32, 32), np.float32)
        expect_error("shape [1,3,31,31]", lambda: send_http("timm", np.zeros((1, 3, 31, 31), np.float32)),
                     "unexpected shape")
        expect_error("dtype FP64", lambda: send_http("timm", z.astype(np.float64), dtype="FP64"), "FP64")
        expect_error("dtype INT64", lambda: send_http("timm", z.astype(np.int64), dtype="INT64"), "INT64")
        expect_error("batch 9 (limit 8)", lambda: send_http("timm", np.zeros((9, 3, 32, 32), np.float32)),
                     "batch-size must be <= 8")
        expect_error("no input", lambda: send_http("timm", z, inputs=False), "expected 1 inputs but got 0")
        expect_error("unknown input 'pixels'", lambda: send_http("timm", z, name="pixels"), "pixels")
        expect_error("unknown output 'probs'", lambda: send_http("timm", z, outs=("probs",)), "probs")
        expect_error("gRPC, shape [2,3,16,16]", lambda: infer_grpc("timm", np.zeros((2, 3, 16, 16), np.float32)),
                     "unexpected shape")
        # the loose model's dims are all -1: these reach the backend, which answers
        expect_error("backend: shape [1,3,31,31]", lambda: send_http("timm_loose", np.zeros((1, 3, 31, 31), np.float32)),
                     "vitc: model 'timm_loose': input 'input' has shape [1,3,31,31]; at batch 1 the model takes "
                     "[1,3,32,32]")
        expect_error("backend: batch 9", lambda: send_http("timm_loose", np.zeros((9, 3, 32, 32), np.float32)),
                     "batch 9; the model runs batches 1 to 8")
        expect_error("backend: rank 3", lambda: send_http("timm_loose", np.zeros((3, 32, 32), np.float32)),
                     "unexpected shape")
        expect_error("fixed1: batch 2", lambda: send_http("fixed1", np.zeros((2, 4, 6), np.float32), name=fixed_in,
                                                          outs=()), "unexpected shape")
        # good and bad at once on one model: each answered on its own
        results = {}

        def one(k, arr):
            try:
                results[k] = ("ok", infer_grpc("timm_loose", arr, client=tg.InferenceServerClient(
                    f"127.0.0.1:{server.grpc}")))
            except InferenceServerException as e:
                results[k] = ("error", str(e))
        ths = [threading.Thread(target=one, args=(k, x["b3"] if k % 2 else np.zeros((1, 3, 30, 30), np.float32)))
               for k in range(8)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        check(all((results[k][0] == "ok" and np.array_equal(results[k][1], ref["timm3"])) if k % 2
                  else results[k][0] == "error" for k in range(8)),
              "8 concurrent requests, every other one bad: the bad ones answered with errors, the good ones right")

        # ---- load test ----
        lm = {"face": ("face", x["face1"], ref["face1"]), "timm": ("timm", x["b1"], ref["timm1"])}[load_model]
        offline = {}
        for b in (1, 8):
            p = run([vitc, "bench", so[lm[0]], "--batch", str(b), "--time", "5", "--json"])
            offline[b] = json.loads(p.stdout)
        stats0 = grpc.get_inference_statistics(lm[0], as_json=True)["model_stats"][0]
        lat, errors, wrong, max_err = [], [], [0], [0.0]
        lock = threading.Lock()
        stop_at = [0.0]

        def client_loop(k):
            c = tg.InferenceServerClient(f"127.0.0.1:{server.grpc}")
            i = tg.InferInput("input", list(lm[1].shape), "FP32")
            i.set_data_from_numpy(lm[1])
            o = [tg.InferRequestedOutput("output")]
            mine, worst = [], 0.0
            while time.time() < stop_at[0]:
                t = time.perf_counter()
                try:
                    y = c.infer(lm[0], [i], outputs=o).as_numpy("output")
                except InferenceServerException as e:
                    with lock:
                        errors.append(str(e))
                    continue
                mine.append(time.perf_counter() - t)
                e = rel_err(y, lm[2]) if y.shape == lm[2].shape else float("inf")
                worst = max(worst, e)
                if e > BATCHED_BAR:
                    with lock:
                        wrong[0] += 1
            with lock:
                lat.extend(mine)
                max_err[0] = max(max_err[0], worst)
            c.close()
        stop_at[0] = time.time() + load_s
        t0 = time.perf_counter()
        ths = [threading.Thread(target=client_loop, args=(k,)) for k in range(nclients)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        wall = time.perf_counter() - t0
        # the server counts a request after answering it: the last few may be counted a moment later
        for _ in range(50):
            stats1 = grpc.get_inference_statistics(lm[0], as_json=True)["model_stats"][0]
            n_inf = int(stats1["inference_count"]) - int(stats0["inference_count"])
            n_exec = int(stats1["execution_count"]) - int(stats0["execution_count"])
            if n_inf >= len(lat):
                break
            time.sleep(0.05)
        lat_ms = np.sort(np.array(lat)) * 1e3
        pct = (lambda q: float(lat_ms[min(len(lat_ms) - 1, int(np.ceil(q / 100 * len(lat_ms))) - 1)])) \
            if len(lat_ms) else (lambda q: float("nan"))
        thr = len(lat) / wall
        print(f"load test: {lm[0]} ({lm[1].shape[1:]} per image), {nclients} gRPC clients, batch 1 each, "
              f"{wall:.1f} s, {os.cpu_count()} cores shared by the server and the clients:")
        print(f"  Triton + vitc backend: {thr:9.1f} images/s, latency p50 {pct(50):7.2f} ms, p99 {pct(99):7.2f} ms "
              f"(client side, {len(lat)} requests; the dynamic batcher ran {n_inf} inferences in {n_exec} "
              f"executions: {n_inf / max(n_exec, 1):.2f} per execution)")
        for b in (1, 8):
            r = offline[b]
            print(f"  vitc bench, batch {b}:  {r['images_per_s']:9.1f} images/s, latency p50 "
                  f"{r['latency']['p50_ms']:7.2f} ms, p99 {r['latency']['p99_ms']:7.2f} ms (per batch of {b}, "
                  f"{r['threads']} threads)")
        check(not errors, f"load test: no errors ({len(errors)}{': ' + errors[0][:200] if errors else ''})")
        check(wrong[0] == 0, f"load test: every answer within {BATCHED_BAR:g} of vitc run's at batch 1 ({wrong[0]} "
              f"beyond; the largest difference {max_err[0]:.1e})")
        check(len(lat) > 0 and n_inf >= len(lat), f"load test: {len(lat)} requests answered, the server counted {n_inf}")
        check(n_exec < n_inf, f"load test: the dynamic batcher gathered requests ({n_inf} inferences in {n_exec} "
              "executions)")

        # ---- reload while serving ----
        counts = {"timm": 0, "tv": 0, "other": 0, "errors": 0}
        first_err = []
        rstop = threading.Event()

        def swap_loop():
            c = tg.InferenceServerClient(f"127.0.0.1:{server.grpc}")
            while not rstop.is_set():
                try:
                    y = infer_grpc("swap", x["b3"], client=c)
                except InferenceServerException as e:
                    with lock:
                        counts["errors"] += 1
                        first_err.append(str(e))
                    continue
                k = "timm" if close(y, ref["timm3"]) else "tv" if close(y, ref["tv3"]) else "other"
                with lock:
                    counts[k] += 1
            c.close()
        ths = [threading.Thread(target=swap_loop) for _ in range(4)]
        for t in ths:
            t.start()
        time.sleep(1.0)
        y = infer_http("swap", x["b3"])
        check(close(y, ref["timm3"]), "swap, version 1 = timm: timm's outputs")
        write("tv", "swap", max_queue_delay_us=500)  # model.so renamed over by another model, config rewritten
        t0 = time.time()
        http.load_model("swap")
        print(f"  swap reloaded in {time.time() - t0:.2f} s")
        y = infer_http("swap", x["b3"])
        check(close(y, ref["tv3"]), "swap reloaded with model.so replaced by torchvision's: its outputs")
        time.sleep(1.0)
        write("timm", "swap", version=2, max_queue_delay_us=500)
        http.load_model("swap")
        y = infer_http("swap", x["b3"])
        check(close(y, ref["timm3"]), "swap reloaded with a version 2 (timm): served, timm's outputs")
        check(http.is_model_ready("swap", "2") and not http.is_model_ready("swap", "1"),
              "swap: version 2 ready, version 1 unloaded")
        time.sleep(1.0)
        rstop.set()
        for t in ths:
            t.join()
        print(f"  during the reloads: {counts['timm']} answers of timm, {counts['tv']} of torchvision, "
              f"{counts['other']} of neither, {counts['errors']} errors")
        check(counts["errors"] == 0 and counts["other"] == 0 and counts["timm"] > 0 and counts["tv"] > 0,
              "reloads while 4 clients send: no errors, every answer one model's or the other's"
              + (f" (first error: {first_err[0][:200]})" if first_err else ""))

        # ---- metrics, liveness, a clean stop ----
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        succ = [ln for ln in metrics.splitlines()
                if ln.startswith("nv_inference_request_success{") and f'model="{lm[0]}"' in ln]
        n_succ = int(float(succ[0].split()[-1])) if succ else -1
        check(n_succ >= len(lat), f"metrics: nv_inference_request_success for {lm[0]} is {n_succ} "
              f"(>= the {len(lat)} of the load test)")
        check(http.is_server_live() and http.is_model_ready("timm"), "the server is live and timm ready after all that")
        http.close()
        grpc.close()
        rc = server.stop()
        log = server.log()
        check(rc == 0, f"tritonserver stops on SIGTERM with exit status 0 (got {rc})")
        for name in ["timm", "timm_min", "fixed1", "face"]:
            check(f"vitc: model '{name}' version 1 unloaded" in log, f"the backend unloaded {name}")
        check("Segmentation fault" not in log and "Aborted" not in log, "the server log has no crash")

        # ---- a model.so rewritten in place while loaded: refused, the loaded one still served ----
        # (a server of its own: after a failed reload, Triton 2.51 keeps counting the failed
        # model as live and its stop waits for it until --exit-timeout-secs, then exits 1)
        repo2 = os.path.join(work, "repo2")
        vt.write_model_repository(so["timm"], repo2, "swap", vitc_cli=vitc, max_queue_delay_us=500)
        server = Server(tserver, repo2, backends, os.path.join(work, "server2.log"),
                        ["--model-control-mode=explicit", "--load-model=*", "--exit-timeout-secs=1"])
        check(server.start(), "a second server starts")
        http = th.InferenceServerClient(f"127.0.0.1:{server.http}")
        v1 = os.path.join(repo2, "swap", "1", "model.so")
        with open(so["timm"], "rb") as f:
            data = f.read()
        with open(v1, "r+b") as f:  # the same inode, written again (the same bytes: the loaded code is unharmed)
            f.write(data)
        os.utime(v1, ns=(time.time_ns(), time.time_ns() + 10**9))
        try:
            http.load_model("swap")
            check(False, "swap with model.so rewritten in place: refused")
        except InferenceServerException as e:
            check("rewritten in place" in str(e), f"swap with model.so rewritten in place: refused ({str(e)[:200]!r})")
        y = infer_http("swap", x["b3"])
        check(np.array_equal(y, ref["timm3"]), "swap still serves the model loaded before")
        http.close()
        server.stop()
    finally:
        if server:
            server.stop(signal.SIGKILL)
        if failures or keep:
            print(f"(work directory kept: {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"test_triton: {len(failures)} failed, in {time.time() - t_start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
