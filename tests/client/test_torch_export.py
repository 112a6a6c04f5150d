"""tuned_gpu.torch.export (client/python/tuned_gpu/torch): every op kind it
supports, the four models of examples/torch, and torch.compile's
backend where torch has one. Each exported graph must pass `tunectl
validate`, and its round trip must hold: the graph run by tuned's
reference interpreter (tuned_exec_interpret) on the module's own
tensors gives the module's results, within the tolerance tuned verifies
kernels with (||out - ref|| / ||ref||, kernels/verify.c).

usage: test_torch_export.py TUNECTL LIBTUNED_EXEC  (exit status 0:
passed, 77: skipped, torch missing)
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile

import needs_torch  # noqa: F401 (first: the package's path, or exit 77)
import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import tuned_gpu.torch  # noqa: E402
from tuned_gpu.torch import capture, value_of  # noqa: E402
from torch_examples import load_example  # noqa: E402

TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2, "i32": 1e-2}
TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                "i32": torch.int32}


class Checker:
    def __init__(self, tunectl, library):
        self.tunectl = tunectl
        self.lib = ctypes.CDLL(library)
        self.lib.tuned_exec_interpret.argtypes = [
            ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
            ctypes.c_size_t]
        self.lib.tuned_exec_interpret.restype = ctypes.c_int
        self.failures = []
        self.work = tempfile.mkdtemp()

    def fail(self, case, text):
        self.failures.append("%s: %s" % (case, text))

    def validate(self, case, graph):
        path = os.path.join(self.work, "graph.json")
        with open(path, "w") as f:
            json.dump(graph, f)
        out = subprocess.run([self.tunectl, "validate", path], capture_output=True, text=True)
        if out.returncode:
            self.fail(case, "tunectl validate: %s%s\n%s" % (out.stdout, out.stderr,
                                                            json.dumps(graph, indent=1)))
        return out.returncode == 0

    def interpret(self, graph, inputs):
        """The outputs of `graph` by the reference interpreter, on the
        input tensors by name."""
        buffers = {}
        for name, decl in graph["tensors"].items():
            dtype = TORCH_DTYPES[decl["dtype"]]
            if decl.get("role") == "input":
                buffers[name] = inputs[name].detach().to(dtype).contiguous()
            elif decl.get("role") == "output":
                buffers[name] = torch.empty(decl["shape"], dtype=dtype)
        pointers = (ctypes.c_void_p * len(graph["tensors"]))(
            *[buffers[n].data_ptr() if n in buffers else None for n in graph["tensors"]])
        why = ctypes.create_string_buffer(512)
        if self.lib.tuned_exec_interpret(json.dumps(graph).encode(), pointers, why,
                                         len(why)) < 0:
            raise RuntimeError(why.value.decode())
        return {n: b for n, b in buffers.items() if graph["tensors"][n].get("role") == "output"}

    def round_trip(self, case, exported):
        """Each partition's graph validates and, interpreted on the
        tensors torch had, gives what torch gave for its outputs; the
        number of tensors compared."""
        results = capture(exported.graph_module, exported.example_inputs)
        compared = 0
        for p in exported.partitions:
            if not self.validate(case, p.graph):
                continue
            given = {n: value_of(s, results, exported.graph_module) for n, s in p.inputs.items()}
            got = self.interpret(p.graph, given)
            for name, source in p.outputs.items():
                want = value_of(source, results, exported.graph_module).detach().double()
                out = got[name].double()
                if out.shape != want.shape:
                    self.fail(case, "%s has shape %s, torch's %s" % (name, list(out.shape),
                                                                    list(want.shape)))
                    continue
                error = (out - want).norm().item() / max(want.norm().item(), 1e-30)
                tolerance = TOLERANCE[p.graph["tensors"][name]["dtype"]]
                if not error <= tolerance:
                    self.fail(case, "%s differs from torch by %.3g (tolerance %g)\n%s" % (
                        name, error, tolerance, "\n".join(p.graph["ops"])))
                compared += 1
        return compared


class Case(nn.Module):
    """A module computing `f(self, *inputs)`, with the given submodules."""

    def __init__(self, f, **modules):
        super().__init__()
        self.f = f
        for name, m in modules.items():
            setattr(self, name, m)


class Unary(Case):
    def forward(self, a):
        return self.f(self, a)


class Binary(Case):
    def forward(self, a, b):
        return self.f(self, a, b)


def case(name, f, inputs, needle, **modules):
    """(name, module, inputs, what its graph must contain)."""
    return name, (Unary, Binary)[len(inputs) - 1](f, **modules).eval(), inputs, needle


def r(*shape):
    return torch.randn(*shape)


# A buffer folded in as a number, and a one-element one kept as a tensor.
_CONSTANTS = case("constants", lambda s, x: x * s.scale + s.offset, (r(3, 4),), "* 0.5")
_CONSTANTS[1].register_buffer("scale", torch.tensor(0.5))
_CONSTANTS[1].register_buffer("offset", torch.tensor([1.25]))

# Each op kind the exporter supports, at least once.
CASES = [
    case("linear", lambda s, x: s.lin(x), (r(2, 3, 6),), "sum(", lin=nn.Linear(6, 5)),
    case("linear_functional", lambda s, x, w: F.linear(x, w), (r(3, 6), r(4, 6)), "sum("),
    case("matmul", lambda s, a, b: torch.matmul(a, b), (r(2, 3, 4, 5), r(3, 5, 2)), "sum("),
    case("matmul_vector", lambda s, a, b: a @ b, (r(3, 4), r(4)), "sum("),
    case("bmm", lambda s, a, b: torch.bmm(a, b), (r(2, 3, 4), r(2, 4, 5)), "sum("),
    case("conv2d", lambda s, x: s.conv(x), (r(1, 4, 5, 5),), "select(",
         conv=nn.Conv2d(4, 6, 3, padding=1)),
    case("conv2d_strided_dilated_grouped", lambda s, x: s.conv(x), (r(2, 4, 7, 6),),
         "select(", conv=nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2)),
    case("conv2d_functional_valid", lambda s, x, w: F.conv2d(x, w, stride=(1, 2)),
         (r(1, 3, 5, 6), r(2, 3, 2, 3)), "sum("),
    case("arithmetic", lambda s, a, b: (a + b) * 2 - b / (a * a + 1) - 0.5 + (-a) ** 3,
         (r(3, 4), r(4)), "pow("),
    case("max_min_erf", lambda s, a, b: torch.maximum(a, b) - torch.minimum(a, b)
         + torch.max(a, b) * torch.erf(a.clone()) - torch.neg(b).abs(), (r(3, 4), r(4)),
         "erf("),
    case("broadcast_rsub", lambda s, a, b: 1 - a * b, (r(2, 1, 4), r(3, 1)), " - "),
    case("relu", lambda s, x: F.relu(x) + torch.relu(x) + x.relu(), (r(3, 4),), "relu("),
    case("gelu", lambda s, x: F.gelu(x), (r(3, 4),), "gelu("),
    case("gelu_tanh", lambda s, x: F.gelu(x, approximate="tanh"), (r(3, 4),), "gelu_tanh("),
    case("silu", lambda s, x: F.silu(x), (r(3, 4),), "silu("),
    case("sigmoid", lambda s, x: torch.sigmoid(x), (r(3, 4),), "sigmoid("),
    case("tanh", lambda s, x: torch.tanh(x), (r(3, 4),), "tanh("),
    case("exp", lambda s, x: torch.exp(x), (r(3, 4),), "exp("),
    case("log", lambda s, x: torch.log(x.abs() + 1), (r(3, 4),), "log("),
    case("rsqrt", lambda s, x: torch.rsqrt(x * x + 1), (r(3, 4),), "rsqrt("),
    case("sqrt", lambda s, x: x.abs().sqrt(), (r(3, 4),), "sqrt("),
    case("softmax", lambda s, x: F.softmax(x, dim=-1) + x.softmax(1), (r(2, 3, 5),), "max("),
    case("log_softmax", lambda s, x: F.log_softmax(x, 0), (r(4, 3),), "log("),
    case("layer_norm", lambda s, x: s.ln(x), (r(2, 3, 4),), "rsqrt(", ln=nn.LayerNorm([3, 4])),
    case("layer_norm_functional", lambda s, x: F.layer_norm(x, (4,), eps=1e-3), (r(3, 4),),
         "rsqrt("),
    case("group_norm", lambda s, x: s.gn(x), (r(2, 4, 3, 3),), "rsqrt(",
         gn=nn.GroupNorm(2, 4)),
    case("reductions", lambda s, x: x.sum(1) + x.mean(dim=(1,), keepdim=True).squeeze(1)
         + torch.amax(x, -1).sum(-1, keepdim=True) + x.max(dim=1)[0] + torch.max(x, 1).values,
         (r(3, 4, 4),), "max("),
    case("reduce_all", lambda s, x: x.sum() + torch.max(x) + x.mean(), (r(3, 4),), "sum("),
    case("index_maps", lambda s, x: s.lin(x.view(2, 12).reshape(2, 3, 4).permute(2, 0, 1)
                                           .transpose(0, 1).flatten(1).t()),
         (r(24),), "/ ", lin=nn.Linear(2, 3)),
    case("index_maps_more", lambda s, x: (x.unsqueeze(0).expand(3, 2, 5) * 2).squeeze()
         + x.T.contiguous().t(), (r(2, 5),), "* 2"),
    case("select_unflatten_expand_as", lambda s, a, b: a.select(1, 2).unflatten(1, (2, 3))
         + b.expand_as(a.select(1, 2).unflatten(1, (2, 3))).to(torch.float32),
         (r(2, 4, 6), r(2, 1, 3)), "[i0, 2, "),
    case("slicing", lambda s, x: x[:, 1:5:2, None] * x[..., -1:].unsqueeze(1)
         + x.narrow(1, 2, 2)[:, None, :], (r(3, 6),), "+ 1"),
    case("chunk_split", lambda s, x: torch.tanh(x.chunk(3, 1)[2])
         + x.split([1, 2, 3], 1)[1].sum(1, keepdim=True), (r(2, 6),), "+ 4"),
    case("cat", lambda s, a, b: torch.cat([a * 2, b, a], dim=1) + 1, (r(2, 3), r(2, 1)),
         "select("),
    _CONSTANTS,
    case("f16", lambda s, x: ((x * 2 + 1).sum(-1) - x[:, 0]).float() * 0.5, (r(3, 4).half(),),
         "* 0.5"),
    case("i32", lambda s, a, b: a * 3 + b[0], (torch.arange(-6, 6, dtype=torch.int32),
                                               torch.arange(5, 17, dtype=torch.int32)), "* 3"),
    case("lstm_cell_module", lambda s, x, h: s.cell(x, (h, h * 0.5))[1] + s.cell(x)[0],
         (r(2, 5), r(2, 4)), "sigmoid(", cell=nn.LSTMCell(5, 4)),
    case("bf16", lambda s, x: F.softmax(s.ln(s.lin(x)), -1), (r(3, 8).bfloat16(),), "max(",
         lin=nn.Linear(8, 6).bfloat16(), ln=nn.LayerNorm(6).bfloat16()),
]


def check_cases(checker):
    for name, module, inputs, needle in CASES:
        try:
            exported = tuned_gpu.torch.export(module, inputs)
        except Exception as e:  # report and go on with the other cases
            checker.fail(name, "export raised %s: %s" % (type(e).__name__, e))
            continue
        if exported.report.stays:
            checker.fail(name, "nodes stay in torch: %s" % exported.report.stays)
        if len(exported.partitions) != 1:
            checker.fail(name, "%d partitions, not 1" % len(exported.partitions))
            continue
        ops = "\n".join(exported.partitions[0].graph["ops"])
        if needle not in ops:
            checker.fail(name, "no %r in the graph:\n%s" % (needle, ops))
        if not checker.round_trip(name, exported):
            checker.fail(name, "no output compared")


EXAMPLES = ("bert_layer", "llama_mlp", "lstm_cell", "cnn_block")


def check_examples(checker):
    """Each model in one partition, nothing left with torch."""
    for name in EXAMPLES:
        model, inputs = load_example(name)
        exported = tuned_gpu.torch.export(model, inputs)
        if exported.report.stays:
            checker.fail(name, "nodes stay in torch: %s" % exported.report.stays)
        if len(exported.partitions) != 1:
            checker.fail(name, "%d partitions, not 1:\n%s" % (len(exported.partitions),
                                                             exported.report))
        compared = checker.round_trip(name, exported)
        want = 2 if name == "lstm_cell" else 1
        if compared != want:
            checker.fail(name, "%d outputs compared, not %d" % (compared, want))


def check_unsupported(checker):
    """What stays with torch, and why; the rest still exported."""
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.lin = nn.Linear(4, 4)
            self.drop = nn.Dropout(0.5)

        def forward(self, ids, x):
            e = self.embed(ids)                     # a gather: torch
            y = torch.tanh(self.lin(e) + x)         # tuned
            z = torch.cumsum(y, 1)                  # not supported: torch
            w = self.drop(z * 2).double()           # training dropout, float64
            best = torch.max(y, 2)                  # its indices are read: torch
            return (w.float() + 1) * y[:, 0:1], x.sum().item(), best[0] + best[1]

    model = Mixed().train()
    inputs = (torch.tensor([[1, 2, 3]]), r(1, 3, 4))
    exported = tuned_gpu.torch.export(model, inputs)
    stays = exported.report.stays
    want = {"embed": "module Embedding is not supported",
            "cumsum": "function cumsum is not supported",
            "drop": "dropout in training mode",
            "double": "dtype float64 is not one of",
            "float_1": "input double: dtype float64",
            "item": "its result is float, not a tensor",
            "max_1": "max over a dim whose indices are used"}
    for node, why in want.items():
        if why not in stays.get(node, ""):
            checker.fail("unsupported", "%s: %r, want %r" % (node, stays.get(node), why))
    parts = exported.report.partitions
    if not (parts.get("lin") == parts.get("tanh") == parts.get("add") is not None):
        checker.fail("unsupported", "lin, add and tanh not in one partition: %s" % parts)
    if parts.get("mul_1") is None or parts.get("mul_1") == parts.get("tanh"):
        checker.fail("unsupported", "the last product is not a partition of its own "
                     "(it follows torch's nodes): %s" % exported.report)
    checker.round_trip("unsupported", exported)


class SizedView(nn.Module):
    def forward(self, x, n):
        return torch.relu(x.view(n, -1)) * 2


class Branching(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


def check_dynamic_and_untraceable(checker):
    """A size given at run time stays with torch; a module fx cannot
    trace is refused, saying so."""
    gm = torch.fx.symbolic_trace(SizedView())
    inputs = (r(4, 3), 2)
    exported = tuned_gpu.torch.export(gm, inputs)
    if "a dynamic shape: the size n" not in exported.report.stays.get("view", ""):
        checker.fail("dynamic", "view: %r" % exported.report.stays.get("view"))
    if "view: stays in torch: a dynamic shape" not in str(exported.report):
        checker.fail("dynamic", "the printed report:\n%s" % exported.report)
    checker.round_trip("dynamic", exported)
    try:
        tuned_gpu.torch.export(Branching(), r(3))
        checker.fail("untraceable", "no error")
    except TypeError as e:
        if "torch.fx cannot trace Branching" not in str(e):
            checker.fail("untraceable", str(e))


class Chain(nn.Module):
    def forward(self, x):
        for _ in range(600):
            x = torch.tanh(x * 0.75 + 0.5)
        return x


def check_partition_limit(checker):
    """A graph too long for one partition is cut into several, each
    within the limit, which in a row still give torch's result; here at
    200 ops, as at graph.json's 4096."""
    model, inputs = Chain(), (r(2, 3),)
    exported = tuned_gpu.torch.export(model, inputs, max_ops=200)
    sizes = [len(p.graph["ops"]) for p in exported.partitions]
    if len(sizes) != 9 or max(sizes) > 200:
        checker.fail("limit", "partitions of %s ops, not 9 of at most 200" % sizes)
    if exported.report.stays:
        checker.fail("limit", "nodes stay in torch: %s" % exported.report.stays)
    checker.round_trip("limit", exported)


def check_compile(checker):
    """torch.compile(backend="tuned"): the model's results unchanged, and
    each example's graph, as dynamo captured it, exported whole."""
    if not hasattr(torch, "compile"):
        print("SKIP torch.compile backend: torch %s has no torch.compile" % torch.__version__)
        return
    for name in EXAMPLES:
        model, inputs = load_example(name)
        before = len(tuned_gpu.torch.compiled)
        compiled = torch.compile(model, backend="tuned")
        with torch.no_grad():
            want, got = model(*inputs), compiled(*inputs)
        want, got = (x if isinstance(x, tuple) else (x,) for x in (want, got))
        if len(want) != len(got) or not all(torch.equal(w, g) for w, g in zip(want, got)):
            checker.fail("compile " + name, "the compiled model's result differs")
        if len(tuned_gpu.torch.compiled) != before + 1:
            checker.fail("compile " + name, "%d graphs exported, not 1"
                         % (len(tuned_gpu.torch.compiled) - before))
            continue
        exported = tuned_gpu.torch.compiled[-1]
        if exported.report.stays or len(exported.partitions) != 1:
            checker.fail("compile " + name, "not one partition:\n%s" % exported.report)
        checker.round_trip("compile " + name, exported)


def main():
    checker = Checker(sys.argv[1], sys.argv[2])
    torch.manual_seed(1)
    check_cases(checker)
    check_examples(checker)
    check_unsupported(checker)
    check_dynamic_and_untraceable(checker)
    check_partition_limit(checker)
    check_compile(checker)
    for f in checker.failures:
        print("FAIL:", f)
    print("torch export: %d case(s), %d failure(s)" % (len(CASES), len(checker.failures)))
    sys.exit(1 if checker.failures else 0)


if __name__ == "__main__":
    main()
