"""The backward graphs of the examples (examples/*_small_grad.json, what
`tunectl grad` writes) against torch autograd: the examples as PyTorch
writes them, differentiated by torch in double precision (bench/peers.py's
model of NAME_grad, which bench/compare times), and the backward graph run
by tuned's reference interpreter
(tuned_exec_interpret) on the same inputs and incoming gradients, every
tensor of both graphs held in f32 so that storage rounds little. Each
gradient must agree within 1e-4 (||tuned - torch|| / ||torch||). Each
example is checked three times: as `tunectl grad` writes it with --save
none (recomputing the forward results it reads), auto and all (reading
them saved, as the forward graph --forward writes computes them).

usage: test_grad_torch.py TUNECTL LIBTUNED_EXEC  (exit status 0: passed,
77: skipped, torch missing)
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
try:
    import torch
except ImportError:
    print("SKIP: torch is not installed for %s" % sys.executable)
    sys.exit(77)
import peers  # noqa: E402

TOLERANCE = 1e-4
EXAMPLES = {
    "ln_residual_small": ["x", "r", "gamma", "beta"],
    "softmax_scores_small": ["P"],
    "gpt3_mlp_small": ["X", "W1", "W2"],
    "lstm_cell_small": ["x", "h", "c", "Wx", "Wh", "b"],
}


def in_f32(graph):
    """The graph with every float tensor f32."""
    for decl in graph["tensors"].values():
        if decl["dtype"] in ("f16", "bf16"):
            decl["dtype"] = "f32"
    return graph


def backward_graph(tunectl, name, wrt, save="none"):
    """What `tunectl grad --save SAVE` writes for example `name`: the
    backward graph (with save none, checked to be the one examples/
    holds) and the forward graph that outputs what it reads saved (None:
    nothing is)."""
    with tempfile.TemporaryDirectory() as work:
        out, fwd = os.path.join(work, "grad.json"), os.path.join(work, "fwd.json")
        subprocess.run([tunectl, "grad", os.path.join(ROOT, "examples", name + ".json"),
                        "--wrt", ",".join(wrt), "--out", out, "--save", save,
                        "--forward", fwd], check=True, capture_output=True)
        with open(out) as f:
            written = json.load(f)
        saving = None
        if os.path.exists(fwd):
            with open(fwd) as f:
                saving = json.load(f)
    if save == "none":
        with open(os.path.join(ROOT, "examples", name + "_grad.json")) as f:
            if json.load(f) != written:
                raise AssertionError("examples/%s_grad.json is not what tunectl grad "
                                     "writes" % name)
    elif saving is None:
        raise AssertionError("%s: --save %s saved nothing" % (name, save))
    return written, saving


def interpret(lib, graph, given):
    """The outputs of `graph` by the reference interpreter, its inputs
    from `given` (f32 tensors by name)."""
    buffers = {}
    for name, decl in graph["tensors"].items():
        if decl.get("role") == "input":
            buffers[name] = given[name].float().contiguous()
        elif decl.get("role") == "output":
            buffers[name] = torch.empty(decl["shape"], dtype=torch.float32)
    pointers = (ctypes.c_void_p * len(graph["tensors"]))(
        *[buffers[n].data_ptr() if n in buffers else None for n in graph["tensors"]])
    why = ctypes.create_string_buffer(512)
    if lib.tuned_exec_interpret(json.dumps(graph).encode(), pointers, why, len(why)) < 0:
        raise RuntimeError(why.value.decode())
    return {n: b for n, b in buffers.items() if graph["tensors"][n].get("role") == "output"}


def check(tunectl, lib, name, wrt, save):
    """The failures of example `name`'s backward graph against autograd,
    the saved tensors (--save) written by the forward graph that saves
    them, run by the interpreter on the same inputs."""
    with open(os.path.join(ROOT, "examples", name + ".json")) as f:
        forward = in_f32(json.load(f))
    backward, saving = backward_graph(tunectl, name, wrt, save)
    backward = in_f32(backward)
    gen = torch.Generator().manual_seed(1)
    given = {}
    for n, decl in forward["tensors"].items():
        if decl.get("role") == "input":
            given[n] = torch.rand(decl["shape"], generator=gen).float() * 2 - 1
    saved = {}
    if saving is not None:
        saved = {n: t for n, t in interpret(lib, in_f32(saving), given).items()
                 if n in backward["tensors"]}
    for n, decl in backward["tensors"].items():
        if decl.get("role") == "input" and n not in given and n not in saved:
            given[n] = torch.rand(decl["shape"], generator=gen).float() * 2 - 1
        elif decl.get("role") == "output":
            given[n] = torch.empty(decl["shape"])
    want = peers.model_of(name + "_grad")({n: t.double() for n, t in given.items()})
    got = interpret(lib, backward, dict(given, **saved))
    failures = []
    for n in wrt:
        error = float((got["d_" + n].double() - want["d_" + n]).norm()
                      / want["d_" + n].norm())
        print("%s, --save %s: d_%s relative error %.2e" % (name, save, n, error))
        if not error <= TOLERANCE:
            failures.append("%s, --save %s: d_%s is %.2e off torch autograd"
                            % (name, save, n, error))
    return failures


def main():
    tunectl, library = sys.argv[1], sys.argv[2]
    lib = ctypes.CDLL(library)
    lib.tuned_exec_interpret.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.c_char_p, ctypes.c_size_t]
    lib.tuned_exec_interpret.restype = ctypes.c_int
    failures = []
    for name, wrt in EXAMPLES.items():
        for save in ("none", "auto", "all"):
            failures += check(tunectl, lib, name, wrt, save)
    for failure in failures:
        print("FAIL: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
