"""graph.json v1 written op by op: tensors, values and index maps.

A value is what a torch node computes, seen from the ops that read it: a
tensor of the graph (Stored), an index map over another value (View:
reshape, permute, slicing, broadcasting, without a copy), or a number.
`value.at(index)` is the text of its element at `index` (a list of index
expressions), so that a view composes into the accesses of its readers
and reaches tuned as the quasi-affine index it is (docs/graph-format.md).
"""
import math
import re

# Words the format reserves, which name neither tensors nor variables.
RESERVED = set("""sum prod in and or not implies mod floor ceil exists true false
    infty nan rat domain range exp log sqrt rsqrt tanh sigmoid relu gelu gelu_tanh
    silu erf abs max min pow select""".split())
_VARIABLE = re.compile(r"^[ir][0-9]+$")
_ATOM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$|^[0-9]+$")
MAX_NAME = 64


class Unsupported(Exception):
    """A node tuned cannot take; the message says why, in torch's terms."""


def number(x):
    """The text of a finite constant, parenthesised when negative."""
    x = float(x)
    if not math.isfinite(x):
        raise Unsupported("the constant %r is not finite" % x)
    text = repr(int(x)) if x.is_integer() and abs(x) < 2 ** 53 else repr(x)
    return "(%s)" % text if x < 0 else text


def paren(e):
    """An index or value expression made safe to combine."""
    return e if _ATOM.match(e) else "(%s)" % e


def ix_add(e, c):
    if c == 0:
        return e
    if e == "0":
        return str(c)
    return "%s %s %d" % (e, "-" if c < 0 else "+", abs(c))


def ix_mul(e, c):
    if c == 1 or e == "0":
        return e
    return "0" if c == 0 else "%s * %d" % (paren(e), c)


def ix_div(e, c):
    return e if c == 1 else "%s / %d" % (paren(e), c)


def ix_mod(e, c):
    return "0" if c == 1 else "%s %% %d" % (paren(e), c)


def ix_sum(terms):
    """The sum of index expressions, zeros dropped."""
    terms = [t for t in terms if t != "0"]
    return " + ".join(terms) if terms else "0"


class Value:
    """Something ops can read element by element."""

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    def at(self, index):
        raise NotImplementedError


class Stored(Value):
    """A tensor of the graph."""

    def __init__(self, graph, name, shape, dtype):
        super().__init__(shape, dtype)
        self.graph, self.name = graph, name

    def at(self, index):
        self.graph.read.add(self.name)
        return "%s[%s]" % (self.name, ", ".join(index))


class View(Value):
    """`base` read through an index map: `index_map(index)` is the index
    of `base` that element `index` of the view reads."""

    def __init__(self, base, shape, index_map):
        super().__init__(shape, base.dtype)
        self.base, self.index_map = base, index_map

    def at(self, index):
        return self.base.at(self.index_map(list(index)))


class Number(Value):
    """A constant folded into the expressions that read it."""

    def __init__(self, x, dtype="f32", shape=()):
        super().__init__(shape, dtype)
        self.text = number(x)

    def at(self, index):
        return self.text


class Graph:
    """The tensors and ops of one graph.json, as they are written."""

    def __init__(self, name):
        self.name = name
        self.tensors = {}
        self.ops = []
        self.written = set()
        self.read = set()
        self.sources = {}  # an input's tensor by what it holds (export.Source)

    def fresh(self, base):
        """A tensor name from `base` (an fx or parameter name) that the
        format takes and this graph does not use yet."""
        name = re.sub(r"[^A-Za-z0-9_]", "_", base)
        if not name[:1].isalpha():
            name = "t" + ("" if name.startswith("_") else "_") + name
        if name in RESERVED or _VARIABLE.match(name):
            name += "_t"
        name = name[:MAX_NAME - 4]
        unique, n = name, 1
        while unique in self.tensors:
            n += 1
            unique = "%s_%d" % (name, n)
        return unique

    def declare(self, base, shape, dtype, role=None):
        if any(d <= 0 for d in shape):
            raise Unsupported("an empty tensor (shape %s)" % list(shape))
        name = self.fresh(base)
        self.tensors[name] = {"shape": list(shape), "dtype": dtype}
        if role:
            self.tensors[name]["role"] = role
        return Stored(self, name, shape, dtype)

    def op(self, base, shape, dtype, body, reduce=None):
        """Writes a new tensor: body(index) is the text of element
        `index`; with reduce = (reducer, sizes), body(index, rvars) is
        folded over the reduction variables, one per size."""
        out = self.declare(base, shape, dtype)
        index = ["i%d" % d for d in range(len(shape))]
        if reduce:
            reducer, sizes = reduce
            rvars = ["r%d" % d for d in range(len(sizes))]
            text = "%s(%s) %s" % (reducer, ", ".join(
                "%s < %d" % (r, n) for r, n in zip(rvars, sizes)), body(index, rvars))
        else:
            text = body(index)
        self.ops.append("%s[%s] = %s" % (out.name, ", ".join(index), text))
        self.written.add(out.name)
        return out

    def copy(self, base, value):
        """A tensor holding `value` (a view or number made concrete)."""
        return self.op(base, value.shape, value.dtype, value.at)

    def mark_output(self, name):
        self.tensors[name]["role"] = "output"

    def to_json(self):
        """The graph.json dict; tensors written and read by no one become
        outputs (the format refuses an unread intermediate)."""
        for name, decl in self.tensors.items():
            if "role" not in decl and name not in self.read:
                decl["role"] = "output"
        return {"version": 1, "name": self.name, "tensors": self.tensors,
                "ops": list(self.ops)}


def broadcast_map(shape, out_shape):
    """The index map reading a tensor of `shape` broadcast to `out_shape`
    (numpy rules: leading dims dropped, size-1 dims pinned at 0)."""
    lead = len(out_shape) - len(shape)

    def index_map(index):
        return ["0" if n == 1 and out_shape[lead + d] != 1 else index[lead + d]
                for d, n in enumerate(shape)]
    return index_map


def broadcast(value, out_shape):
    if value.shape == tuple(out_shape) or isinstance(value, Number):
        return value
    return View(value, out_shape, broadcast_map(value.shape, out_shape))


def reshape_map(src, dst):
    """The index map of a reshape from `src` to `dst` (row-major): dims
    are grouped where their products agree, and each source dim of a
    group is read off the group's flat index with / and %."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        s, d = [], []
        if i < len(src):
            s.append(i)
            i += 1
        if j < len(dst):
            d.append(j)
            j += 1
        while math.prod(src[k] for k in s) != math.prod(dst[k] for k in d):
            if math.prod(src[k] for k in s) < math.prod(dst[k] for k in d):
                s.append(i)
                i += 1
            else:
                d.append(j)
                j += 1
        groups.append((s, d))

    def index_map(index):
        out = [None] * len(src)
        for s, d in groups:
            flat = ix_sum(ix_mul(index[k], math.prod(dst[m] for m in d if m > k))
                          for k in d)
            for pos, k in enumerate(s):
                stride = math.prod(src[m] for m in s if m > k)
                e = ix_div(flat, stride)
                out[k] = "0" if src[k] == 1 else (e if pos == 0 else ix_mod(e, src[k]))
        return out
    return index_map
