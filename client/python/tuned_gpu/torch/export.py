"""From a torch module to tuned graphs (docs/client.md, "From a torch
model").

The module is traced with torch.fx and run once on the example inputs,
which gives every node its shape and dtype. Each node tuned can express
exactly is lowered (lower.py); the others stay with torch, the report
saying why. Supported nodes are grouped into partitions as large as
possible, each a convex part of the fx graph (no path leaves it through
torch and comes back), so a partition runs as one tuned graph between
torch's nodes.
"""
import collections
import dis
import inspect

import torch
import torch.fx as fx

from .graph import Graph, Number, Stored, Unsupported
from .lower import Site, dtype_of, known, lower

# Where a graph tensor's data lives in the torch program: the result of
# fx node `name` (element `index` of it when it is a tuple), or the
# module's parameter or buffer `name` (its qualified name).
Source = collections.namedtuple("Source", "kind name index")

# Reads of a tensor's metadata, whose results are constants once the
# example inputs fix the shapes.
_METADATA_METHODS = {"size", "dim"}
_METADATA_ATTRIBUTES = {"shape", "ndim", "dtype", "device"}
_IN_PLACE = {"iadd", "isub", "imul", "itruediv"}
# graph.json's limits on a graph's ops and on one op's text.
MAX_OPS = 4096
MAX_OP_CHARS = 16384


class Partition:
    """One tuned graph: `graph` (graph.json as a dict), and for its input
    and output tensors, by name, the Source each one is."""

    def __init__(self, graph, inputs, outputs, nodes):
        self.graph, self.inputs, self.outputs, self.nodes = graph, inputs, outputs, nodes

    def __repr__(self):
        return "<Partition %s: %d nodes, %d ops>" % (self.graph["name"], len(self.nodes),
                                                      len(self.graph["ops"]))


class Report:
    """Per fx node, in graph order: where it went. `partitions[name]` is
    the index of its partition; `stays[name]` why it stays with torch;
    `other[name]` what it is otherwise (input, output, parameter,
    constant)."""

    def __init__(self):
        self.partitions, self.stays, self.other = {}, {}, {}
        self.order = []

    def add(self, node, where, text):
        self.order.append(node.name)
        getattr(self, where)[node.name] = text

    def __str__(self):
        lines = []
        for name in self.order:
            if name in self.partitions:
                lines.append("%s: partition %d" % (name, self.partitions[name]))
            elif name in self.stays:
                lines.append("%s: stays in torch: %s" % (name, self.stays[name]))
            else:
                lines.append("%s: %s" % (name, self.other[name]))
        return "\n".join(lines)


class Exported:
    """What export returns: the traced module, the example inputs it ran
    on, its partitions and the report."""

    def __init__(self, graph_module, example_inputs, partitions, report):
        self.graph_module, self.example_inputs = graph_module, example_inputs
        self.partitions, self.report = partitions, report


class _Proxy(fx.Proxy):
    """fx's proxy, unpacked into as many parts as the code asks for
    (`a, b = x.chunk(2, -1)`, `batch, seq, _ = x.size()`) on every Python:
    torch 1.13 finds the unpacking instruction by a bytecode position
    that Python 3.11 changed."""

    def __iter__(self):
        frame = inspect.currentframe().f_back
        for inst in dis.get_instructions(frame.f_code):
            if inst.offset == frame.f_lasti and inst.opname == "UNPACK_SEQUENCE":
                return (self[i] for i in range(inst.argval))
        return self.tracer.iter(self)


class Tracer(fx.Tracer):
    def proxy(self, node):
        return _Proxy(node, self)


def trace(module):
    """The module as an fx graph; a TypeError saying why when torch.fx
    cannot trace it (control flow on tensor values, say)."""
    if isinstance(module, fx.GraphModule):
        return module
    try:
        return fx.GraphModule(module, Tracer().trace(module))
    except Exception as e:
        raise TypeError("tuned_gpu.torch.export: torch.fx cannot trace %s: %s: %s" % (
            type(module).__name__, type(e).__name__, e)) from e


class _Group:
    """Nodes bound for one partition, the ops they may write, and the
    nodes outside that read them."""

    def __init__(self, node, ops):
        self.members, self.ops = {node}, ops
        self.users = set(node.users)

    def absorb(self, other):
        self.members |= other.members
        self.ops += other.ops
        self.users = {u for u in self.users | other.users if u not in self.members}


class _Capture(fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.results = {}

    def run_node(self, node):
        result = super().run_node(node)
        self.results[node] = result
        return result


def capture(graph_module, example_inputs):
    """Every node's result on the example inputs, by fx node."""
    interpreter = _Capture(graph_module)
    with torch.no_grad():
        interpreter.run(*example_inputs)
    return interpreter.results


def tensor_or_tensors(x):
    return isinstance(x, torch.Tensor) or (
        isinstance(x, (tuple, list)) and x and all(isinstance(t, torch.Tensor) for t in x))


def tensors_of(result):
    """The tensors of a node's result that a graph may hold: all but the
    indices of max and min over a dim."""
    if hasattr(result, "indices") and isinstance(result, tuple):
        return [result.values]
    return list(result) if isinstance(result, (tuple, list)) else [result]


def value_of(source, results, module):
    """The tensor a Source names, given capture's results and the module:
    how a partition's tensors are found to run it."""
    if source.kind == "node":
        result = next(v for n, v in results.items() if n.name == source.name)
        return result if source.index is None else result[source.index]
    return module.get_parameter(source.name) if source.kind == "parameter" \
        else module.get_buffer(source.name)


class _Exporter:
    def __init__(self, gm, results, name, max_ops):
        self.gm, self.results, self.name, self.max_ops = gm, results, name, max_ops
        self.nodes = list(gm.graph.nodes)
        self.constants = {}   # node: its folded value
        self.supported = set()
        self.op_count = {}    # supported node: the ops it may write, at most
        self.reasons = {}     # node: why it stays with torch
        self.others = {}      # node: what it is, neither lowered nor staying

    # Classification.

    def is_metadata(self, node):
        if node.op == "call_method":
            return node.target in _METADATA_METHODS
        return node.op == "call_function" and node.target is getattr and \
            node.args[1] in _METADATA_ATTRIBUTES

    def foldable(self, node):
        """A result that is no tensor and depends on tensors only
        through their metadata."""
        if node.op not in ("call_function", "call_method") or \
                tensor_or_tensors(self.results.get(node)):
            return False
        return self.is_metadata(node) or all(p in self.constants for p in node.all_input_nodes)

    def classify(self):
        for node in self.nodes:
            result = self.results.get(node)
            if node.op == "placeholder":
                self.others[node] = "input of the module"
            elif node.op == "output":
                self.others[node] = "output of the module"
            elif node.op == "get_attr":
                what = "constant folded in" if self.folded_attribute(node) is not None \
                    else "parameter (a graph input where a partition reads it)"
                self.others[node] = what
            elif self.foldable(node):
                self.constants[node] = result
                self.others[node] = "constant folded in: %r" % (result,)
            else:
                try:
                    self.check(node)
                    self.supported.add(node)
                except Unsupported as why:
                    self.reasons[node] = str(why)

    def folded_attribute(self, node):
        result = self.results.get(node)
        if isinstance(result, torch.Tensor) and result.numel() == 1 and \
                not isinstance(result, torch.nn.Parameter):
            return Number(result.item(), dtype_of(result), tuple(result.shape))
        return None

    def check(self, node):
        """Raises Unsupported if `node` cannot be lowered on its own."""
        result = self.results.get(node)
        if not tensor_or_tensors(result):
            raise Unsupported("its result is %s, not a tensor" % type(result).__name__)
        for tensor in tensors_of(result):
            dtype_of(tensor)
        module = self.gm.get_submodule(node.target) if node.op == "call_module" else None
        name = known(node, module)
        in_place = name in _IN_PLACE or (isinstance(name, str) and name.endswith("_")) or \
            getattr(module, "inplace", False)
        if in_place and node.args and isinstance(node.args[0], fx.Node) and \
                len(node.args[0].users) > 1:
            raise Unsupported("an in-place op on a tensor that is read elsewhere")
        graph = Graph("check")
        self.lower_node(graph, node, {}, lambda p: self.input_value(graph, p))
        if any(len(op) > MAX_OP_CHARS for op in graph.ops):
            raise Unsupported("an op longer than graph.json's %d characters" % MAX_OP_CHARS)
        # at most one op more: the copy of a view that torch reads
        self.op_count[node] = max(len(graph.ops), 1)

    # Lowering.

    def input_value(self, graph, node, bindings=None):
        """The value of a node outside the partition: a constant, or graph
        inputs holding its tensors."""
        if node in self.constants:
            return self.constants[node]
        if node.op == "get_attr":
            folded = self.folded_attribute(node)
            if folded is not None:
                return folded
            return self.attribute(graph, node.target, bindings)
        result = self.results.get(node)
        if isinstance(result, torch.Tensor):
            return self.declare_input(graph, node.name, result, Source("node", node.name, None),
                                      bindings)
        if tensor_or_tensors(result):
            return [self.declare_part(graph, node, i, t, bindings) for i, t in enumerate(result)]
        if node.op == "placeholder" and not isinstance(result, (float, bool)):
            raise Unsupported("a dynamic shape: the size %s is an input of the graph"
                              % node.name)
        raise Unsupported("argument %s is %s, not a tensor" % (node.name,
                                                               type(result).__name__))

    def declare_part(self, graph, node, i, tensor, bindings):
        """Part i of a tuple a node computed, as an input; or, where the
        part cannot be one, why, raised by the node that reads it."""
        try:
            return self.declare_input(graph, "%s_%d" % (node.name, i), tensor,
                                      Source("node", node.name, i), bindings)
        except Unsupported as why:
            return why

    def declare_input(self, graph, name, tensor, source, bindings):
        try:
            dtype = dtype_of(tensor)
        except Unsupported as why:
            raise Unsupported("input %s: %s" % (source.name, why))
        if source not in graph.sources:
            stored = graph.declare(name, tuple(tensor.shape), dtype, "input")
            graph.sources[source] = stored
            if bindings is not None:
                bindings[stored.name] = source
        return graph.sources[source]

    def attribute(self, graph, qualified, bindings):
        """A parameter or buffer of the module as a graph input, once per
        graph; None where the module has None (no bias)."""
        owner, _, attr = qualified.rpartition(".")
        tensor = getattr(self.gm.get_submodule(owner) if owner else self.gm, attr)
        if tensor is None:
            return None
        kind = "parameter" if isinstance(tensor, torch.nn.Parameter) else "buffer"
        return self.declare_input(graph, qualified, tensor, Source(kind, qualified, None),
                                  bindings)

    def lower_node(self, graph, node, env, outside, bindings=None):
        def resolve(n):
            return env[n] if n in env else outside(n)
        args = fx.node.map_arg(node.args, resolve)
        kwargs = fx.node.map_arg(node.kwargs, resolve)
        module = self.gm.get_submodule(node.target) if node.op == "call_module" else None

        def parameter(attr):
            return self.attribute(graph, "%s.%s" % (node.target, attr) if node.target
                                  else attr, bindings)
        site = Site(graph, node, self.results[node], parameter, module)
        return lower(site, node, args, kwargs)

    # Partitions.

    def partition(self):
        """Groups of supported nodes, merged along fx edges, in graph
        order, where the union stays convex and within max_ops."""
        group = {n: _Group(n, self.op_count[n]) for n in self.supported}
        position = {n: i for i, n in enumerate(self.nodes)}
        for node in self.nodes:
            if node not in self.supported:
                continue
            for producer in node.all_input_nodes:
                a, b = group.get(producer), group[node]
                if a is None or a is b or a.ops + b.ops > self.max_ops or \
                        not self.convex(a, b, position, position[node]):
                    continue
                big, small = (a, b) if len(a.members) >= len(b.members) else (b, a)
                big.absorb(small)
                for n in small.members:
                    group[n] = big
        seen, groups = set(), []
        for node in self.nodes:
            if node in group and id(group[node]) not in seen:
                seen.add(id(group[node]))
                groups.append([n for n in self.nodes if n in group[node].members])
        return groups

    def convex(self, a, b, position, last):
        """No path from the union of groups `a` and `b` leaves it and comes
        back (to a node at most at position `last`, the latest of both).
        Folded constants (a tensor's size) are no path: they are numbers
        in the partition."""
        frontier = [u for u in a.users | b.users if u not in a.members and u not in b.members]
        reached = set()
        while frontier:
            n = frontier.pop()
            if n in a.members or n in b.members:
                return False
            if n not in reached and n not in self.constants and position[n] < last:
                reached.add(n)
                frontier.extend(n.users)
        return True

    def build(self, index, members):
        """The graph of one group: its nodes lowered in order, the values
        that torch reads made outputs."""
        graph = Graph("%s_%d" % (self.name, index))
        inputs, outputs, env, outside_values = {}, {}, {}, {}

        def outside(n):
            if n not in outside_values:
                outside_values[n] = self.input_value(graph, n, inputs)
            return outside_values[n]
        for node in members:
            env[node] = self.lower_node(graph, node, env, outside, inputs)
        computed = len(graph.ops)
        member_set = set(members)
        for node in members:
            if any(u not in member_set and u not in self.constants for u in node.users):
                values = env[node] if isinstance(env[node], list) else [env[node]]
                for i, value in enumerate(values):
                    if isinstance(value, Unsupported):
                        continue
                    name = self.output(graph, node.name if len(values) == 1 else
                                       "%s_%d" % (node.name, i), value, outputs)
                    outputs[name] = Source("node", node.name,
                                           i if isinstance(env[node], list) else None)
        if not computed:
            return None
        return Partition(graph.to_json(), inputs, outputs, [n.name for n in members])

    def output(self, graph, base, value, outputs):
        """The name of an output tensor holding `value`: its own tensor
        where this graph writes it, else a copy."""
        if not (isinstance(value, Stored) and value.name in graph.written and
                value.name not in outputs):
            value = graph.copy(base, value)
        graph.mark_output(value.name)
        return value.name

    def run(self):
        self.classify()
        partitions = []
        placed = {}
        for members in self.partition():
            partition = self.build(len(partitions), members)
            if partition is None:
                for n in members:
                    self.reasons[n] = "only index maps (views) here: nothing to compute"
                continue
            for n in members:
                placed[n] = len(partitions)
            partitions.append(partition)
        self.report = Report()
        for node in self.nodes:
            if node in placed:
                self.report.add(node, "partitions", placed[node])
            elif node in self.reasons:
                self.report.add(node, "stays", self.reasons[node])
            else:
                self.report.add(node, "other", self.others[node])
        return partitions


def export(module, example_inputs, name=None, max_ops=MAX_OPS):
    """Traces `module` (a torch.nn.Module or fx.GraphModule), runs it once
    on `example_inputs` (a tensor or a tuple of them) for shapes and
    dtypes, and returns an Exported: its tuned partitions, each of at
    most `max_ops` ops, and the report of where each fx node went."""
    example_inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) \
        else tuple(example_inputs)
    gm = trace(module)
    results = capture(gm, example_inputs)
    exporter = _Exporter(gm, results, name or type(module).__name__, max_ops)
    partitions = exporter.run()
    return Exported(gm, example_inputs, partitions, exporter.report)
