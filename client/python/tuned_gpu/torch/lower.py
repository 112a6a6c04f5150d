"""The ops of graph.json that compute one torch fx node.

`lower(site, node, args, kwargs)` takes the node's arguments as values
(graph.py) and Python constants, writes the node's ops into the site's
graph and returns its value; it raises Unsupported, saying why, for
what it cannot express exactly. Each lowering computes what torch
computes, with the statistics of normalisations and softmax kept in f32
as torch's kernels keep them.
"""
import math

import torch

from .graph import (Number, Unsupported, Value, View, broadcast, ix_add, ix_div,
                    ix_mul, ix_sum, number, reshape_map)

DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
          torch.int32: "i32"}

# One-argument functions of the format, by the torch name that means them.
UNARY = {"relu": "relu", "silu": "silu", "sigmoid": "sigmoid", "tanh": "tanh",
         "exp": "exp", "log": "log", "rsqrt": "rsqrt", "sqrt": "sqrt", "abs": "abs",
         "erf": "erf"}
BINARY = {"add": "+", "iadd": "+", "sub": "-", "isub": "-", "mul": "*", "imul": "*",
          "truediv": "/", "div": "/", "itruediv": "/"}


def dtype_of(tensor):
    if tensor.dtype not in DTYPES:
        raise Unsupported("dtype %s is not one of float32, float16, bfloat16, int32"
                          % str(tensor.dtype).replace("torch.", ""))
    return DTYPES[tensor.dtype]


class Site:
    """Where a node is lowered: the graph, the node, what it computed on
    the example inputs (its shape and dtype), and its module's
    parameters as graph inputs."""

    def __init__(self, graph, node, result, parameter, module=None):
        self.graph, self.node, self.result = graph, node, result
        self.parameter, self.module = parameter, module

    @property
    def shape(self):
        return tuple(self.result.shape)

    @property
    def dtype(self):
        return dtype_of(self.result)

    def op(self, body, reduce=None, shape=None, dtype=None, suffix=""):
        return self.graph.op(self.node.name + suffix, self.shape if shape is None else shape,
                             dtype or self.dtype, body, reduce)


def arg(args, kwargs, i, name, default=None):
    """Argument `name`, given at position i or by keyword."""
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


def value(x, what="argument"):
    """A tensor value or a number as a value."""
    if isinstance(x, Value):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return Number(x)
    raise Unsupported("%s %r is not a tensor or a number" % (what, x))


def dims(d, rank):
    """Dims as a sorted list of non-negative ints."""
    d = [d] if isinstance(d, int) else list(d)
    return sorted(x % rank for x in d) if rank else []


# Elementwise.

def elementwise(site, text, *operands):
    """An op applying `text` (a format string of the operands' element
    texts) to operands broadcast to the node's shape."""
    ops = [broadcast(value(x), site.shape) for x in operands]
    return site.op(lambda index: text.format(*[o.at(index) for o in ops]))


def lower_binary(site, name, args, kwargs):
    a, b = args[0], args[1]
    if name == "div" and kwargs.get("rounding_mode"):
        raise Unsupported("division with rounding mode %r" % kwargs["rounding_mode"])
    alpha = kwargs.get("alpha", 1)
    if alpha != 1:
        return elementwise(site, "{0} %s %s * {1}" % (BINARY[name], number(alpha)), a, b)
    return elementwise(site, "{0} %s {1}" % BINARY[name], a, b)


def lower_pow(site, args, kwargs):
    if args[1] == 2:
        return elementwise(site, "{0} * {0}", args[0])
    return elementwise(site, "pow({0}, {1})", args[0], args[1])


def lower_gelu(site, args, kwargs):
    approximate = arg(args, kwargs, 1, "approximate", "none")
    if approximate not in ("none", "tanh"):
        raise Unsupported("gelu approximation %r" % approximate)
    return elementwise(site, "gelu_tanh({0})" if approximate == "tanh" else "gelu({0})",
                       args[0])


# Contractions.

def lower_linear(site, x, weight, bias):
    """y = x weight^T + bias over x's last dim, the bias its own op."""
    k = x.shape[-1]
    lead = len(site.shape) - 1
    product = site.op(lambda i, r: "%s * %s" % (x.at(i[:lead] + r), weight.at([i[lead]] + r)),
                      ("sum", [k]), dtype="f32" if bias is not None else None,
                      suffix="_mm" if bias is not None else "")
    if bias is None:
        return product
    return site.op(lambda i: "%s + %s" % (product.at(i), bias.at([i[-1]])))


def lower_matmul(site, a, b):
    """torch.matmul: vectors promoted, batch dims broadcast."""
    if len(a.shape) == 1:
        a = View(a, (1,) + a.shape, lambda i: i[1:])
    if len(b.shape) == 1:
        b = View(b, b.shape + (1,), lambda i: i[:1])
    batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    shape = batch + (a.shape[-2], b.shape[-1])
    a = broadcast(a, batch + a.shape[-2:])
    b = broadcast(b, batch + b.shape[-2:])
    n = len(batch)
    full = site.op(lambda i, r: "%s * %s" % (a.at(i[:n + 1] + r), b.at(i[:n] + r + [i[n + 1]])),
                   ("sum", [a.shape[-1]]), shape=shape)
    if full.shape == site.shape:
        return full
    return View(full, site.shape, reshape_map(full.shape, site.shape))


def pair(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x, x)


def lower_conv2d(site, x, weight, bias, stride, padding, dilation, groups):
    """A 2-d convolution, zero padding as a select on the window."""
    if len(x.shape) != 4:
        raise Unsupported("conv2d of an input of rank %d (batched NCHW only)" % len(x.shape))
    stride, dilation = pair(stride), pair(dilation)
    kernel = weight.shape[2:]
    if padding == "valid":
        padding = (0, 0)
    elif padding == "same":
        padding = tuple(dilation[d] * (kernel[d] - 1) // 2 for d in range(2))
        if any(dilation[d] * (kernel[d] - 1) % 2 for d in range(2)):
            raise Unsupported("'same' padding that is not symmetric")
    padding = pair(padding)
    per_group_out = weight.shape[0] // groups
    height, width = x.shape[2:]

    def body(i, r):
        c, kr, ks = r
        channel = c if groups == 1 else ix_sum([ix_mul(ix_div(i[1], per_group_out),
                                                       weight.shape[1]), c])
        rows = ix_sum([ix_mul(i[2], stride[0]), ix_mul(kr, dilation[0])])
        cols = ix_sum([ix_mul(i[3], stride[1]), ix_mul(ks, dilation[1])])
        read = x.at([i[0], channel, ix_add(rows, -padding[0]), ix_add(cols, -padding[1])])
        guards = []
        for at, pad, size in ((rows, padding[0], height), (cols, padding[1], width)):
            if pad:
                guards += ["%s >= %d" % (at, pad), "%s <= %d" % (at, pad + size - 1)]
        if guards:
            read = "select(%s, %s, 0)" % (" && ".join(guards), read)
        return "%s * %s" % (read, weight.at([i[1], c, kr, ks]))
    conv = site.op(body, ("sum", list(weight.shape[1:])),
                   dtype="f32" if bias is not None else None,
                   suffix="_conv" if bias is not None else "")
    if bias is None:
        return conv
    return site.op(lambda i: "%s + %s" % (conv.at(i), bias.at([i[1]])))


# Reductions and normalisations.

def reduce_over(site, x, axes, reducer, scale=None, keepdim=False, dtype=None, suffix=""):
    """A reduction of x over `axes` (sorted), times `scale` inside."""
    kept = [d for d in range(len(x.shape)) if d not in axes]
    shape = tuple(1 if d in axes else x.shape[d] for d in range(len(x.shape))) if keepdim \
        else tuple(x.shape[d] for d in kept)

    def body(i, r):
        index, it, rt = [], iter(i), iter(r)
        for d in range(len(x.shape)):
            index.append(next(rt) if d in axes else next(it))
            if keepdim and d in axes:
                next(it)
        text = x.at(index)
        return "%s * %s" % (text, scale) if scale else text
    return site.op(body, (reducer, [x.shape[d] for d in axes]), shape=shape, dtype=dtype,
                   suffix=suffix)


def collapse(index, axes):
    """The index of a row statistic (reduced over `axes`) at `index`."""
    return [e for d, e in enumerate(index) if d not in axes]


def lower_reduction(site, name, args, kwargs):
    x = args[0]
    dim = arg(args, kwargs, 1, "dim", None)
    keepdim = arg(args, kwargs, 2, "keepdim", False)
    if kwargs.get("dtype") is not None:
        raise Unsupported("%s with a dtype conversion" % name)
    axes = list(range(len(x.shape))) if dim is None or dim == [] else dims(dim, len(x.shape))
    reducer = "sum" if name in ("sum", "mean") else "max"
    scale = number(1.0 / math.prod(x.shape[d] for d in axes)) if name == "mean" else None
    return reduce_over(site, x, axes, reducer, scale, keepdim)


def reads_values(node):
    """Whether `node` takes the values of a max over a dim: [0] or
    .values."""
    name = getattr(node.target, "__name__", "") if node.op == "call_function" else ""
    return (name, node.args[1]) in (("getitem", 0), ("getattr", "values"))


def lower_max(site, args, kwargs):
    """torch.max: of all elements, of two tensors, or over a dim (its
    values only: the indices are not a tensor expression)."""
    if len(args) > 1 and isinstance(args[1], Value) or "other" in kwargs:
        return elementwise(site, "max({0}, {1})", args[0], arg(args, kwargs, 1, "other"))
    if len(args) == 1 and "dim" not in kwargs:
        return reduce_over(site, args[0], list(range(len(args[0].shape))), "max")
    if not all(reads_values(u) for u in site.node.users):
        raise Unsupported("max over a dim whose indices are used")
    dim = dims(arg(args, kwargs, 1, "dim"), len(args[0].shape))
    keepdim = arg(args, kwargs, 2, "keepdim", False)
    site.result = site.result[0]
    return [reduce_over(site, args[0], dim, "max", keepdim=keepdim),
            Unsupported("the indices of a max over a dim")]


def lower_softmax(site, x, dim, log=False):
    """Max-subtracted, as softmax_scores.json: m, e, z in f32."""
    axes = dims(dim, len(x.shape))
    m = reduce_over(site, x, axes, "max", dtype="f32", suffix="_max")
    e = site.op(lambda i: "exp(%s - %s)" % (x.at(i), m.at(collapse(i, axes))), dtype="f32",
                suffix="_exp")
    z = reduce_over(site, e, axes, "sum", dtype="f32", suffix="_sum")
    if log:
        return site.op(lambda i: "%s - %s - log(%s)" % (x.at(i), m.at(collapse(i, axes)),
                                                        z.at(collapse(i, axes))))
    return site.op(lambda i: "%s / %s" % (e.at(i), z.at(collapse(i, axes))))


def normalise(site, x, grouped, axes, stat_index, eps, scale_shift):
    """(x - mean) * rsqrt(var + eps), then scale_shift(i, text): mean and
    (biased) var over `axes` of `grouped` (x or a view of it), read at
    stat_index(i) for element i of x; ln_residual.json's way, the
    statistics in f32."""
    inverse = number(1.0 / math.prod(grouped.shape[d] for d in axes))
    mean = reduce_over(site, grouped, axes, "sum", inverse, dtype="f32", suffix="_mean")

    def squares(i, r):
        full = rebuild(i, r, axes, len(grouped.shape))
        centred = "(%s - %s)" % (grouped.at(full), mean.at(i))
        return "%s * %s * %s" % (centred, centred, inverse)
    var = site.op(squares, ("sum", [grouped.shape[d] for d in axes]), shape=mean.shape,
                  dtype="f32", suffix="_var")
    return site.op(lambda i: scale_shift(i, "(%s - %s) * rsqrt(%s + %s)" % (
        x.at(i), mean.at(stat_index(i)), var.at(stat_index(i)), number(eps))))


def rebuild(kept, reduced, axes, rank):
    """A full index from the kept dims' and the reduced dims' variables."""
    kept, reduced = iter(kept), iter(reduced)
    return [next(reduced) if d in axes else next(kept) for d in range(rank)]


def affine(weight, bias, index_of):
    """The per-element scale and shift of a normalisation, if any."""
    def scale_shift(i, text):
        if weight is not None:
            text = "%s * %s" % (text, weight.at(index_of(i)))
        if bias is not None:
            text = "%s + %s" % (text, bias.at(index_of(i)))
        return text
    return scale_shift


def lower_layer_norm(site, x, shape, weight, bias, eps):
    lead = len(x.shape) - len(shape)
    return normalise(site, x, x, list(range(lead, len(x.shape))), lambda i: i[:lead], eps,
                     affine(weight, bias, lambda i: i[lead:]))


def lower_group_norm(site, x, groups, weight, bias, eps):
    """Statistics over each group of channels and all positions of a
    sample, read through a view of x as [N, G, C/G, ...]."""
    batch, channels = x.shape[:2]
    per_group = channels // groups
    grouped_shape = (batch, groups, per_group) + x.shape[2:]
    grouped = View(x, grouped_shape, reshape_map(x.shape, grouped_shape))
    return normalise(site, x, grouped, list(range(2, len(grouped_shape))),
                     lambda i: [i[0], ix_div(i[1], per_group)], eps,
                     affine(weight, bias, lambda i: [i[1]]))


def lower_batch_norm(site, x, mean, var, weight, bias, eps, training):
    """Inference batch norm: the running statistics, per channel."""
    if training:
        raise Unsupported("batch norm in training mode (it updates running statistics)")
    if mean is None or var is None:
        raise Unsupported("batch norm without running statistics")
    scale_shift = affine(weight, bias, lambda i: [i[1]])
    return site.op(lambda i: scale_shift(i, "(%s - %s) * rsqrt(%s + %s)" % (
        x.at(i), mean.at([i[1]]), var.at([i[1]]), number(eps))))


def lower_lstm_cell(site, x, state, w_ih, w_hh, b_ih, b_hh):
    """torch.nn.LSTMCell (gates i, f, g, o), as lstm_cell.json: the two
    products, the gates, then c' and h'; its value is [h', c']."""
    if len(x.shape) != 2:
        raise Unsupported("an LSTM cell on an unbatched input")
    hidden = w_hh.shape[1]
    shape = (x.shape[0], hidden)
    site.result = site.result[0]
    h, c = state if state is not None else (Number(0, shape=shape), Number(0, shape=shape))
    terms = [site.op(lambda i, r: "%s * %s" % (x.at([i[0]] + r), w_ih.at([i[1]] + r)),
                     ("sum", [x.shape[1]]), shape=(x.shape[0], 4 * hidden), dtype="f32",
                     suffix="_input")]
    if state is not None:
        terms.append(site.op(lambda i, r: "%s * %s" % (h.at([i[0]] + r), w_hh.at([i[1]] + r)),
                             ("sum", [hidden]), shape=terms[0].shape, dtype="f32",
                             suffix="_hidden"))
    biases = [b for b in (b_ih, b_hh) if b is not None]
    gates = site.op(lambda i: " + ".join([t.at(i) for t in terms] +
                                         [b.at([i[1]]) for b in biases]),
                    shape=terms[0].shape, dtype="f32", suffix="_gates")

    def gate(i, k):
        return gates.at([i[0], ix_add(i[1], k * hidden)])
    c_new = site.op(lambda i: "sigmoid(%s) * %s + sigmoid(%s) * tanh(%s)" % (
        gate(i, 1), c.at(i), gate(i, 0), gate(i, 2)), shape=shape, suffix="_c")
    h_new = site.op(lambda i: "sigmoid(%s) * tanh(%s)" % (gate(i, 3), c_new.at(i)),
                    shape=shape, suffix="_h")
    return [h_new, c_new]


# Index maps.

def permute_view(x, order):
    order = [d % len(x.shape) for d in order]
    shape = tuple(x.shape[d] for d in order)

    def index_map(index):
        out = [None] * len(order)
        for k, d in enumerate(order):
            out[d] = index[k]
        return out
    return View(x, shape, index_map)


def transpose_view(x, a, b):
    order = list(range(len(x.shape)))
    a, b = a % len(order), b % len(order)
    order[a], order[b] = order[b], order[a]
    return permute_view(x, order)


def reshape_view(x, shape):
    shape = tuple(shape)
    return x if shape == x.shape else View(x, shape, reshape_map(x.shape, shape))


def slice_view(x, dim, start, step, length):
    """Elements start, start + step, ... of `dim`."""
    shape = x.shape[:dim] + (length,) + x.shape[dim + 1:]

    def index_map(index):
        return index[:dim] + [ix_add(ix_mul(index[dim], step), start)] + index[dim + 1:]
    return View(x, shape, index_map)


def pick_view(x, dim, at):
    """Element `at` of `dim`, the dim dropped."""
    shape = x.shape[:dim] + x.shape[dim + 1:]
    return View(x, shape, lambda index: index[:dim] + [str(at)] + index[dim:])


def getitem_view(x, key):
    """x[key] for ints, slices, None and Ellipsis."""
    key = list(key) if isinstance(key, tuple) else [key]
    if any(isinstance(k, Value) for k in key):
        raise Unsupported("indexing with a tensor (a gather, not an affine index)")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        fill = len(x.shape) - (len(key) - 1 - key.count(None))
        key = key[:at] + [slice(None)] * fill + key[at + 1:]
    dim = 0
    for k in key:
        if k is None:
            x = View(x, x.shape[:dim] + (1,) + x.shape[dim:],
                     lambda index, d=dim: index[:d] + index[d + 1:])
            dim += 1
        elif isinstance(k, int):
            x = pick_view(x, dim, k % x.shape[dim])
        elif isinstance(k, slice):
            r = range(*k.indices(x.shape[dim]))
            if len(r) == 0:
                raise Unsupported("an empty slice")
            if (r.start, r.step, len(r)) != (0, 1, x.shape[dim]):
                x = slice_view(x, dim, r.start, r.step, len(r))
            dim += 1
        else:
            raise Unsupported("index %r" % (k,))
    return x


def split_views(x, sizes, dim):
    dim %= len(x.shape)
    views, start = [], 0
    for n in sizes:
        views.append(slice_view(x, dim, start, 1, n))
        start += n
    return views


def lower_cat(site, tensors, dim):
    """Each input in its range of `dim`, chosen by nested selects."""
    tensors = [value(t) for t in tensors]
    dim %= len(site.shape)

    def body(index):
        starts = [sum(t.shape[dim] for t in tensors[:k]) for k in range(len(tensors))]
        text = None
        for t, start in reversed(list(zip(tensors, starts))):
            read = t.at(index[:dim] + [ix_add(index[dim], -start)] + index[dim + 1:])
            text = read if text is None else "select(%s < %d, %s, %s)" % (
                index[dim], start + t.shape[dim], read, text)
        return text
    return site.op(body)


def expand_view(x, shape):
    shape = tuple(x.shape[d - len(shape) + len(x.shape)] if n == -1 else n
                  for d, n in enumerate(shape))
    return broadcast(x, shape)


def squeeze_view(site, x):
    return reshape_view(x, site.shape)


# Dispatch, by the name a function or method has in torch.

def _softmax(site, a, k, log=False):
    if k.get("dtype") is not None:
        raise Unsupported("softmax with a dtype conversion")
    return lower_softmax(site, a[0], arg(a, k, 1, "dim"), log)


def _dropout(site, a, k):
    if arg(a, k, 2, "training", True):
        raise Unsupported("dropout in training mode (random)")
    return a[0]


def _to(site, a, k):
    """A dtype conversion or a copy: exact where the dtype stays."""
    if dtype_of(site.result) != a[0].dtype:
        return site.op(a[0].at)
    return a[0]


def _view(site, a, k):
    return reshape_view(a[0], site.shape)


def _split(site, a, k):
    """chunk and split: the parts' sizes as torch made them."""
    dim = arg(a, k, 2, "dim", 0)
    return split_views(a[0], [t.shape[dim] for t in site.result], dim)


def _getitem(site, a, k):
    if isinstance(a[0], list):
        if isinstance(a[0][a[1]], Unsupported):
            raise a[0][a[1]]
        return a[0][a[1]]
    return getitem_view(a[0], a[1])


def _narrow(site, a, k):
    dim = arg(a, k, 1, "dim") % len(a[0].shape)
    start = arg(a, k, 2, "start") % a[0].shape[dim]
    return slice_view(a[0], dim, start, 1, arg(a, k, 3, "length"))


def _select(site, a, k):
    dim = arg(a, k, 1, "dim") % len(a[0].shape)
    return pick_view(a[0], dim, arg(a, k, 2, "index") % a[0].shape[dim])


def _permute(site, a, k):
    order = a[1] if len(a) == 2 and isinstance(a[1], (list, tuple)) else a[1:]
    return permute_view(a[0], k.get("dims", order))


def _conv2d(site, a, k):
    return lower_conv2d(site, a[0], a[1], arg(a, k, 2, "bias"), arg(a, k, 3, "stride", 1),
                        arg(a, k, 4, "padding", 0), arg(a, k, 5, "dilation", 1),
                        arg(a, k, 6, "groups", 1))


def _getattr(site, a, k):
    """x.T, and the values of a max over a dim."""
    if isinstance(a[0], list) and a[1] in ("values", "indices"):
        return _getitem(site, [a[0], ("values", "indices").index(a[1])], k)
    if a[1] != "T":
        raise Unsupported("attribute %s of a tensor" % a[1])
    return permute_view(a[0], list(reversed(range(len(a[0].shape)))))


FUNCTIONS = {
    "getattr": _getattr,
    "linear": lambda s, a, k: lower_linear(s, a[0], a[1], arg(a, k, 2, "bias")),
    "matmul": lambda s, a, k: lower_matmul(s, a[0], a[1]),
    "conv2d": _conv2d,
    "pow": lambda s, a, k: lower_pow(s, a, k),
    "neg": lambda s, a, k: elementwise(s, "-{0}", a[0]),
    "rsub": lambda s, a, k: elementwise(s, "{1} - {0}", a[0], a[1]),
    "gelu": lower_gelu,
    "softmax": _softmax,
    "log_softmax": lambda s, a, k: _softmax(s, a, k, log=True),
    "layer_norm": lambda s, a, k: lower_layer_norm(
        s, a[0], arg(a, k, 1, "normalized_shape"), arg(a, k, 2, "weight"),
        arg(a, k, 3, "bias"), arg(a, k, 4, "eps", 1e-5)),
    "group_norm": lambda s, a, k: lower_group_norm(
        s, a[0], arg(a, k, 1, "num_groups"), arg(a, k, 2, "weight"), arg(a, k, 3, "bias"),
        arg(a, k, 4, "eps", 1e-5)),
    "batch_norm": lambda s, a, k: lower_batch_norm(
        s, a[0], arg(a, k, 1, "running_mean"), arg(a, k, 2, "running_var"),
        arg(a, k, 3, "weight"), arg(a, k, 4, "bias"), arg(a, k, 7, "eps", 1e-5),
        arg(a, k, 5, "training", False)),
    "sum": lambda s, a, k: lower_reduction(s, "sum", a, k),
    "mean": lambda s, a, k: lower_reduction(s, "mean", a, k),
    "amax": lambda s, a, k: lower_reduction(s, "amax", a, k),
    "max": lower_max,
    "maximum": lambda s, a, k: elementwise(s, "max({0}, {1})", a[0], a[1]),
    "minimum": lambda s, a, k: elementwise(s, "min({0}, {1})", a[0], a[1]),
    "cat": lambda s, a, k: lower_cat(s, a[0], arg(a, k, 1, "dim", 0)),
    "concat": lambda s, a, k: lower_cat(s, a[0], arg(a, k, 1, "dim", 0)),
    "view": _view, "reshape": _view, "flatten": _view, "squeeze": _view,
    "unsqueeze": _view, "unflatten": _view,
    "permute": _permute,
    "transpose": lambda s, a, k: transpose_view(a[0], a[1], a[2]),
    "t": lambda s, a, k: transpose_view(a[0], 0, -1),
    "expand": lambda s, a, k: expand_view(
        a[0], a[1] if len(a) == 2 and isinstance(a[1], (list, tuple)) else a[1:]),
    "expand_as": lambda s, a, k: broadcast(a[0], s.shape),
    "getitem": _getitem,
    "narrow": _narrow,
    "select": _select,
    "chunk": _split,
    "split": _split,
    "dropout": _dropout,
    "contiguous": lambda s, a, k: a[0],
    "clone": lambda s, a, k: a[0],
    "to": _to, "float": _to, "half": _to, "bfloat16": _to, "type_as": _to,
}
FUNCTIONS.update({n: (lambda s, a, k, n=n: lower_binary(s, n, a, k)) for n in BINARY})
FUNCTIONS.update({n: (lambda s, a, k, f=f: elementwise(s, f + "({0})", a[0]))
                  for n, f in UNARY.items()})
FUNCTIONS.update({n + "_": FUNCTIONS[n] for n in ("relu", "sigmoid", "tanh", "exp")})
FUNCTIONS.update({"mm": FUNCTIONS["matmul"], "bmm": FUNCTIONS["matmul"],
                  "true_divide": FUNCTIONS["truediv"], "multiply": FUNCTIONS["mul"],
                  "subtract": FUNCTIONS["sub"], "divide": FUNCTIONS["div"]})


MODULES = (torch.nn.Linear, torch.nn.Conv2d, torch.nn.LayerNorm, torch.nn.GroupNorm,
           torch.nn.BatchNorm2d, torch.nn.Softmax, torch.nn.LogSoftmax, torch.nn.GELU,
           torch.nn.Dropout, torch.nn.Flatten, torch.nn.Identity, torch.nn.ReLU,
           torch.nn.SiLU, torch.nn.Sigmoid, torch.nn.Tanh, torch.nn.LSTMCell)


def _module_call(site, m, a, k):
    """A call of a torch.nn module the tracer keeps whole."""
    nn = torch.nn
    p = site.parameter
    if isinstance(m, nn.Linear):
        return lower_linear(site, a[0], p("weight"), p("bias"))
    if isinstance(m, nn.Conv2d):
        if m.padding_mode != "zeros":
            raise Unsupported("conv2d with padding mode %r" % m.padding_mode)
        return lower_conv2d(site, a[0], p("weight"), p("bias"), m.stride, m.padding,
                            m.dilation, m.groups)
    if isinstance(m, nn.LSTMCell):
        return lower_lstm_cell(site, a[0], arg(a, k, 1, "hx"), p("weight_ih"), p("weight_hh"),
                               p("bias_ih"), p("bias_hh"))
    if isinstance(m, nn.LayerNorm):
        return lower_layer_norm(site, a[0], m.normalized_shape, p("weight"), p("bias"),
                                m.eps)
    if isinstance(m, nn.GroupNorm):
        return lower_group_norm(site, a[0], m.num_groups, p("weight"), p("bias"), m.eps)
    if isinstance(m, nn.BatchNorm2d):
        return lower_batch_norm(site, a[0], p("running_mean"), p("running_var"),
                                p("weight"), p("bias"), m.eps,
                                m.training or not m.track_running_stats)
    if isinstance(m, (nn.Softmax, nn.LogSoftmax)):
        return lower_softmax(site, a[0], m.dim, isinstance(m, nn.LogSoftmax))
    if isinstance(m, nn.GELU):
        return lower_gelu(site, a, {"approximate": getattr(m, "approximate", "none")})
    if isinstance(m, nn.Dropout):
        return _dropout(site, a, {"training": m.training})
    if isinstance(m, nn.Flatten):
        return _view(site, a, k)
    if isinstance(m, nn.Identity):
        return a[0]
    for cls, f in ((nn.ReLU, "relu"), (nn.SiLU, "silu"), (nn.Sigmoid, "sigmoid"),
                   (nn.Tanh, "tanh")):
        if isinstance(m, cls):
            return elementwise(site, f + "({0})", a[0])
    raise AssertionError("MODULES names %s, which has no lowering" % type(m).__name__)


def known(node, module):
    """The name node `node` is lowered by (a module's class name for a
    module call); Unsupported if there is none."""
    if node.op == "call_module":
        if not isinstance(module, MODULES):
            raise Unsupported("module %s is not supported" % type(module).__name__)
        return type(module).__name__
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    where = getattr(node.target, "__module__", None) or ""
    if node.op == "call_function" and where.split(".")[0] not in (
            "torch", "_operator", "operator", "builtins", ""):
        raise Unsupported("function %s.%s is not supported" % (where, name))
    if name not in FUNCTIONS:
        raise Unsupported("%s %s is not supported" % (
            "method" if node.op == "call_method" else "function", name))
    return name


def lower(site, node, args, kwargs):
    """The value of fx node `node` (its arguments resolved), its ops
    written into the site's graph."""
    name = known(node, site.module)
    if node.op == "call_module":
        return _module_call(site, site.module, args, kwargs)
    return FUNCTIONS[name](site, list(args), dict(kwargs))
