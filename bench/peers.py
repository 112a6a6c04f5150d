"""The peers bench/compare times tuned against.

Each example is written as a PyTorch user writes it (torch.nn.functional
where it has the operation), in the graph's dtypes. PyTorch 1.13 on the
cpu has no f16 matrix product and no f16 GELU, SiLU, layer norm or
softmax, so there those run in f32 on upcast inputs and round back, as a
user would have to; additions and products stay in the graph's dtypes.
"""
import ctypes
import ctypes.util
import math

import torch
import torch.nn.functional as F


def matmul(a, b):
    """a @ b in the inputs' dtype; in f32 where this device has no such
    product (f16 on the cpu)."""
    if a.device.type == "cpu" and a.dtype in (torch.float16, torch.bfloat16):
        return (a.float() @ b.float()).to(a.dtype)
    return a @ b


def in_f32(fn, x, *args, **kwargs):
    """fn(x) in f32 where this device lacks it for x's dtype (f16 or bf16
    on the cpu), rounded back to x's dtype."""
    if x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16):
        return fn(x.float(), *args, **kwargs).to(x.dtype)
    return fn(x, *args, **kwargs)


def bert_qkv(t):
    heads, dim = t["q"].shape[0], t["q"].shape[2]
    out = {}
    for n in "qkv":
        y = matmul(t["x"], t["w" + n]) + t["b" + n]
        out[n] = y.view(y.shape[0], heads, dim).transpose(0, 1).contiguous()
    return out


def conv_pair(t):
    a1 = F.relu(F.conv2d(t["x"], t["w1"], t["b1"], padding=1))
    return {"y": F.relu(F.conv2d(a1, t["w2"], t["b2"], padding=1))}


def gpt3_mlp(t):
    return {"Y": matmul(in_f32(F.gelu, matmul(t["X"], t["W1"]), approximate="tanh"),
                        t["W2"])}


def llama_mlp(t):
    a = in_f32(F.silu, matmul(t["X"], t["W1"])) * matmul(t["X"], t["V"])
    return {"Y": matmul(a, t["W2"])}


def lstm(gates, c):
    i, f, g, o = gates.chunk(4, dim=1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return {"h_new": torch.sigmoid(o) * torch.tanh(c_new), "c_new": c_new}


def lstm_cell(t):
    return lstm(matmul(t["x"], t["Wx"]) + matmul(t["h"], t["Wh"]) + t["b"], t["c"])


def mi_lstm_cell(t):
    return lstm(matmul(t["x"], t["W"]) * matmul(t["h"], t["U"]) + t["b"], t["c"])


def ln_residual(t):
    s = t["x"] + t["r"]
    return {"y": in_f32(lambda x: F.layer_norm(x, x.shape[-1:], t["gamma"].to(x.dtype),
                                               t["beta"].to(x.dtype), eps=1e-5), s)}


def softmax_scores(t):
    return {"y": in_f32(torch.softmax, t["P"] * 0.125, dim=-1)}


def ln_grad_params(t):
    return {"dgamma": (t["dy"] * t["xhat"]).sum(0, dtype=torch.float32),
            "dbeta": t["dy"].sum(0, dtype=torch.float32)}


MODELS = {"bert_qkv": bert_qkv, "conv_pair": conv_pair, "gpt3_mlp": gpt3_mlp,
          "llama_mlp": llama_mlp, "lstm_cell": lstm_cell, "mi_lstm_cell": mi_lstm_cell,
          "ln_residual": ln_residual, "softmax_scores": softmax_scores,
          "ln_grad_params": ln_grad_params}


def backward(forward):
    """The backward graph of example model `forward` (tunectl grad's, as
    in examples/*_grad.json) as a PyTorch user computes it: autograd of
    the forward model. Its tensors: the forward inputs, d_<y> for each
    forward output y (the gradient flowing in) and d_<x> for each input x
    it gives the gradient of; it returns those d_<x>, in x's dtype."""
    def run(t):
        gradients = {n for n in t if n.startswith("d_")}  # d_<x> and d_<y>
        wrt = [n[2:] for n in gradients if n[2:] in t]
        leaves = {n: t[n].detach().requires_grad_(n in wrt)
                  for n in t if n not in gradients}
        outputs = forward(leaves)
        grads = torch.autograd.grad([outputs[y] for y in outputs],
                                    [leaves[x] for x in wrt],
                                    [t["d_" + y] for y in outputs])
        return {"d_" + x: g.to(t[x].dtype) for x, g in zip(wrt, grads)}
    return run


def model_of(example):
    """The PyTorch version of an example (any of its sizes); of a backward
    graph (NAME_grad), autograd of its forward example's."""
    if example.endswith("_grad"):
        return backward(model_of(example[:-len("_grad")]))
    for prefix in sorted(MODELS, key=len, reverse=True):
        if example.startswith(prefix):
            return MODELS[prefix]
    raise KeyError("no PyTorch version of example %s" % example)


def compiled_ms(model, tensors, mode, clock):
    """torch.compile's time, or None where this torch has no compile."""
    if not hasattr(torch, "compile"):
        return None
    compiled = torch.compile(model, mode=None if mode == "default" else mode)
    return clock.median_ms(lambda: compiled(tensors))


# The matrix products of each example, as (M, N, K) of row-major operands.
def products(example, graph):
    shape = {n: t["shape"] for n, t in graph["tensors"].items()}
    if example.endswith("_grad"):  # a backward graph's are not its forward's
        return []
    if example.startswith("bert_qkv"):
        return [(shape["x"][0], shape["wq"][1], shape["x"][1])] * 3
    if example.startswith("gpt3_mlp"):
        return [(shape["X"][0], shape["W1"][1], shape["X"][1]),
                (shape["X"][0], shape["W2"][1], shape["W2"][0])]
    if example.startswith("llama_mlp"):
        return [(shape["X"][0], shape["W1"][1], shape["X"][1])] * 2 + \
               [(shape["X"][0], shape["W2"][1], shape["W2"][0])]
    if example.startswith("lstm_cell"):
        return [(shape["x"][0], shape["Wx"][1], shape["x"][1])] * 2
    if example.startswith("mi_lstm_cell"):
        return [(shape["x"][0], shape["W"][1], shape["x"][1])] * 2
    if example.startswith("conv_pair"):  # as im2row: (N P Q) x K x (C R S)
        n, c, p, q = shape["x"]
        k, _, r, s = shape["w1"]
        return [(n * p * q, k, c * r * s)] * 2
    return []


class OpenBLAS:
    """cblas_sgemm of libopenblas, row-major, alpha 1, beta 0."""

    def __init__(self):
        path = ctypes.util.find_library("openblas")
        self.lib = ctypes.CDLL(path) if path else None
        if self.lib:
            self.lib.cblas_sgemm.restype = None

    def sgemm(self, m, n, k, a, b, c):
        self.lib.cblas_sgemm(101, 111, 111, m, n, k, ctypes.c_float(1.0),
                             ctypes.c_void_p(a.data_ptr()), k,
                             ctypes.c_void_p(b.data_ptr()), n, ctypes.c_float(0.0),
                             ctypes.c_void_p(c.data_ptr()), n)


_openblas = None


def openblas_ms(example, graph, clock):
    """The example's matrix products alone in f32 through OpenBLAS; None
    without OpenBLAS or products."""
    global _openblas
    _openblas = _openblas or OpenBLAS()
    shapes = products(example, graph)
    if not _openblas.lib or not shapes:
        return None
    operands = [(m, n, k, torch.rand(m, k), torch.rand(k, n), torch.empty(m, n))
                for m, n, k in shapes]

    def run():
        for m, n, k, a, b, c in operands:
            _openblas.sgemm(m, n, k, a, b, c)

    a0 = operands[0]
    run()
    if not torch.allclose(a0[5], a0[3] @ a0[4], rtol=1e-3, atol=1e-3 * math.sqrt(a0[2])):
        raise RuntimeError("cblas_sgemm disagrees with torch on %s" % example)
    return clock.median_ms(run)


class Copy:
    """A copy through memory of 256 MiB (64 MiB on the cpu): run() copies
    once; its bandwidth is bytes read plus written over a time."""

    def __init__(self, device):
        nbytes = (256 if device == "cuda" else 64) << 20
        self.src = torch.rand(nbytes // 4, device=device)
        self.dst = torch.empty_like(self.src)
        self.moved = 2 * nbytes

    def run(self):
        self.dst.copy_(self.src)

    def gbs(self, ms):
        return self.moved / (ms * 1e6)


def matmul_gflops(device, dtype, clock):
    """The rate of a square matrix product on random data in "dtype" (in
    f32 where the device has no such product: f16 and bf16 on the cpu)."""
    n = 8192 if device == "cuda" else 1024
    if device == "cpu":
        dtype = torch.float32
    a, b = ((torch.rand(n, n, device=device) - 0.5).to(dtype) for _ in range(2))
    return 2 * n ** 3 / (clock.median_ms(lambda: a @ b) * 1e6)
