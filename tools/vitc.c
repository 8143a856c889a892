/* vitc.c: the command-line entry point.  Parses the subcommand and hands the
 * rest of the arguments to it; --help and --version live here. */
#include "tools/cli.h"

#include "frontend/onnx.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: vitc <command> [options]\n"
    "\n"
    "vitc compiles Vision Transformers from ONNX.  Commands:\n"
    "  vitc MODEL.onnx -o MODEL.so [--batch N] [-O0|-O1|-O2|-O3] [--target cpu|cuda]\n"
    "           [--cpu NAME] [--features +a,-b] [--weights embedded|external]\n"
    "           [--dump-after=PASS|all] [--verbose]\n"
    "      Compile the model into a shared library that runs it on the CPU (LLVM,\n"
    "      -O3 and the host CPU by default; --cpu/--features choose another) for any\n"
    "      batch from 1 to N (default 16).  The weights are embedded, or written to\n"
    "      MODEL.so.weights beside it with --weights external.  --dump-after prints\n"
    "      the IR after that pass (or every pass) to stdout.  The .so appears only\n"
    "      when the compile succeeds; it never overwrites the model.\n"
    "  vitc MODEL.onnx -o MODEL.so --target cuda [--precision fp16|bf16|tf32|fp32]\n"
    "           [--batch N] [--emit so|cuda]\n"
    "      Compile for NVIDIA GPUs (sm_80 and later): CUDA kernels compiled by NVRTC\n"
    "      for sm_80 and sm_90 plus PTX for later GPUs, embedded in the .so with the\n"
    "      weights; the .so loads anywhere and runs where libcuda finds a GPU.\n"
    "      bf16 (default) and fp16 keep activations in 16 bits with fp32 accumulation;\n"
    "      tf32 uses TF32 tensor cores on fp32 data; fp32 is plain fp32.  --emit cuda\n"
    "      writes the generated CUDA program to -o instead, for reading.\n"
    "  vitc dump MODEL.onnx [--stage imported|optimized] [--format text|dot] [--stats]\n"
    "           [--dump-after=PASS|all] [--explain-fusion]\n"
    "      Print the graph IR: one node per line with types and shapes in terms of the\n"
    "      batch B (text), a Graphviz graph (dot), or one 'OpType count' line per op\n"
    "      type, sorted by op type (--stats).  --stage imported (default) is the graph\n"
    "      as read, with shapes inferred; --stage optimized is after the passes.\n"
    "      --dump-after prints the IR after that pass (or every pass) instead;\n"
    "      --explain-fusion prints how many patterns each pass fused and, for every\n"
    "      candidate that did not fuse, its node and the first condition that failed.\n"
    "  vitc run MODEL.onnx --input [NAME=]FILE.npy ... [--output-dir DIR] [--repeat N]\n"
    "      Run the model with the reference interpreter (plain loops, double\n"
    "      accumulation) and write one NAME.npy per output into DIR (default '.').\n"
    "  vitc run MODEL.so --input [NAME=]FILE.npy ... [--output-dir DIR] [--repeat N]\n"
    "           [--threads N]\n"
    "      Run a compiled model through the runtime, likewise.  --repeat N prints the\n"
    "      min and median time of N runs; --threads 0 (default) is one per core.\n"
    "  vitc compare MODEL.onnx [MODEL.so] [--input [NAME=]FILE.npy ...] [--rtol R]\n"
    "           [--atol A] [--bisect] [--batch N] [--seed S] [--threads N]\n"
    "      Run the reference interpreter and the compiled model (without MODEL.so,\n"
    "      one compiled into a temporary file) on the same inputs (given, or seeded\n"
    "      random normal ones at batch N, default 2 where the model has a batch) and\n"
    "      print per output the max abs error, max rel error (max|out-ref|/max|ref|),\n"
    "      cosine and PASS/FAIL; exit 1 when an output is beyond\n"
    "      max|out-ref| <= A + R*max|ref| (default R 1e-4, A 0; CUDA models R 1e-2\n"
    "      and cosine >= 0.9999).  --bisect names the first tensor where a failing\n"
    "      compiled model parts (compiling the graph cut at tensors, binary search)\n"
    "      and the first pass after which the interpreted graph moves.\n"
    "  vitc inspect MODEL.so\n"
    "      Print what a compiled model holds: inputs and outputs with the batch B,\n"
    "      batch limit, target, vitc version, workspace and weights sizes, kernels.\n"
    "  vitc --help | --version\n"
    "\n"
    "Exit codes: 0 success, 1 a check failed, 2 bad usage or bad input (unreadable or\n"
    "malformed model, unsupported op, shape mismatch), 3 internal error.  Errors name\n"
    "the file and, where there is one, the ONNX node (name and op_type).\n";

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout); /* what was printed before the error comes before it */
    fputs("vitc: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(run 'vitc --help' for usage)\n", stderr);
    va_end(ap);
    return VITC_BAD_INPUT;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return fputs(usage, stderr), VITC_BAD_INPUT;
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0)
        return fputs(usage, stdout), VITC_OK;
    if (strcmp(cmd, "--version") == 0) {
        printf("vitc %s\nONNX: opsets %d-%d\n", VITC_VERSION, ONNX_MIN_OPSET, ONNX_MAX_OPSET);
        const cg_backend *backends[] = {&cg_llvm_backend, &cg_cuda_backend};
        for (int i = 0; i < 2; i++)
            printf("--target %s: %s\n", backends[i]->name,
                   backends[i]->unavailable ? backends[i]->unavailable
                   : backends[i]->describe  ? backends[i]->describe()
                                            : "available");
        return VITC_OK;
    }
    if (strcmp(cmd, "dump") == 0)
        return cmd_dump(argc - 2, argv + 2);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "compare") == 0)
        return cmd_compare(argc - 2, argv + 2);
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(argc - 2, argv + 2);
    /* Anything else is a compile: a model path or an option comes first. */
    size_t n = strlen(cmd);
    if (cmd[0] != '-' && access(cmd, F_OK) != 0 && !(n > 5 && strcmp(cmd + n - 5, ".onnx") == 0))
        return cli_usage_error("unknown command '%s' (and no such model file)", cmd);
    return cmd_compile(argc - 1, argv + 1);
}
