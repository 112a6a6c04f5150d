"""A torch module whose partitions run tuned's plans (docs/client.md, "One
line: tuned kernels in a torch model").

    model = tuned_gpu.torch.optimize(model, example_inputs, budget=120)

The module is exported (export.py); each partition's nodes are replaced,
in the fx graph, by one TunedPartition, which runs the newest plan it
was given, or, before there is one and whenever tuned fails, the
partition's own torch nodes. The plans come from the upgrader
(upgrade.py), a thread of the package that follows the daemon.
"""
import operator
import threading
import time
import warnings

import torch
import torch.fx as fx

from ..errors import TensorError, TunedError
from .export import capture, export
from .lower import DTYPES
from .upgrade import Entry, upgrader

TORCH_DTYPES = {name: dtype for dtype, name in DTYPES.items()}


class TunedWarning(UserWarning):
    """tuned could not run a partition's plan: the partition runs in
    torch (or keeps its plan), and the message says why."""


class _Differentiable(torch.autograd.Function):
    """A partition's plans as one op of autograd: forward runs the forward
    plan on the graph's inputs (`values`, in the partition's order) and
    saves them, with the intermediates the plan outputs for the backward
    graph to read (docs/autodiff.md, "Saved or recomputed"); backward runs
    the backward plan on them and the incoming gradients, which recomputes
    the other intermediates it reads, and gives each input that needs it
    its gradient."""

    @staticmethod
    def forward(ctx, partition, plan, inputs, *values):
        ctx.partition, ctx.inputs = partition, inputs
        ctx.save_for_backward(*values)
        outputs, ctx.saved_results = partition.run_forward(plan, values)
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        needed = ctx.needs_input_grad[3:]
        return (None, None, None) + ctx.partition.run_backward(
            ctx.saved_tensors, ctx.saved_results, grads, needed, ctx.inputs)


class TunedPartition(torch.nn.Module):
    """One partition of an optimized module: called with the values of the
    fx nodes it reads (`reads`, by name), it returns those of its nodes
    that torch reads after it (`gives`), as a tuple.

    It runs its current plan, a (Plan, version) that the upgrader
    replaces in one assignment, so a call runs the one complete plan it
    read at its start; before a plan, or when running one fails, it runs
    `fallback`, the partition's torch nodes, and warns once per cause.

    Where autograd asks for gradients, a call runs its forward plan as one
    autograd op whose backward runs the backward plan (`backward`, a
    (Plan, version) too), of the graph differentiated with respect to
    `wrt` (graph inputs); before a backward plan, it runs in torch.
    """

    def __init__(self, partition, fallback, reads, gives, parameters, wrt):
        super().__init__()
        self.fallback = fallback
        self.name = partition.graph["name"]
        self.graph = partition.graph
        self.reads = reads
        self.gives = gives
        self.key = None
        self.current = (None, 0)
        self.trouble = None   # why tuned is not serving it, set by the upgrader
        self.wrt = wrt        # the inputs its backward graph gives gradients of
        self.grad_key = None
        self.backward = (None, 0)
        self.backward_trouble = None  # why it has no backward plan, set by the upgrader
        self._warned = None
        self._lock = threading.Lock()  # a plan's scratch buffers serve one call at a time
        self._checked = {}    # per direction, the plan whose first call checked every tensor
        self._inputs = self._input_getters(partition.inputs, parameters)
        self._outputs = self._tensor_layout(partition.graph, "output")
        self._results = self._result_layout(partition.outputs)

    @property
    def version(self):
        """The version of the plan it runs; 0 while it runs in torch."""
        plan, version = self.current
        return version if plan is not None else 0

    @property
    def backward_version(self):
        """The version of the backward plan it runs; 0 while its gradients
        come from torch."""
        plan, version = self.backward
        return version if plan is not None else 0

    @staticmethod
    def _tensor_layout(graph, role):
        """The graph's tensors of `role`, by name: shape and torch dtype."""
        return {name: (tuple(d["shape"]), TORCH_DTYPES[d["dtype"]])
                for name, d in graph["tensors"].items() if d.get("role") == role}

    def _input_getters(self, sources, parameters):
        """Per graph input, how a call finds its tensor: a node it reads
        (an element of it, for a tuple), or a parameter or buffer, held
        here and so read in place."""
        position = {name: i for i, name in enumerate(self.reads)}
        getters = {}
        for name, source in sources.items():
            if source.kind != "node":
                tensor = parameters(source.name)
                getters[name] = lambda inputs, t=tensor: t
            elif source.index is None:
                getters[name] = lambda inputs, i=position[source.name]: inputs[i]
            else:
                getters[name] = lambda inputs, i=position[source.name], j=source.index: \
                    inputs[i][j]
        return getters

    def _result_layout(self, outputs):
        """Per node given to torch, the graph outputs that make its value:
        one name, or a tuple's elements in order; None (and `trouble`
        says why) when the graph does not hold it whole."""
        layout = []
        for node in self.gives:
            parts = {s.index: name for name, s in outputs.items() if s.name == node}
            if list(parts) == [None]:
                layout.append(parts[None])
            elif parts and sorted(parts) == list(range(len(parts))):
                layout.append(tuple(parts[i] for i in range(len(parts))))
            else:
                self.trouble = "torch reads %s, which its graph does not output whole" % node
                return None
        return layout

    def forward(self, *inputs):
        plan, version = self.current
        if plan is not None and self._results is not None:
            values = [get(inputs) for get in self._inputs.values()]
            differentiated = torch.is_grad_enabled() and any(v.requires_grad for v in values)
            why = self._why_torch_differentiates(values) if differentiated else None
            if why:
                self._warn(why, False)
            if why is not None:  # "" before the first backward plan: no warning
                return self.fallback(*inputs)
            self._warn(self.trouble, True)
            try:
                if not differentiated:
                    return self._given(self._run(plan, values))
                outputs = _Differentiable.apply(self, plan, inputs, *values)
                return self._given(dict(zip(self._outputs, outputs)))
            except TunedError as e:
                self._failed(plan, version, e)
        self._warn(self.trouble, False)
        return self.fallback(*inputs)

    def _why_torch_differentiates(self, values):
        """Why a call that autograd follows runs in torch: an input needs
        a gradient that the backward graph does not give, or the daemon
        gave it no backward graph; "" (no warning) before its first
        backward plan; None when it runs its plans."""
        if not self.wrt:
            return ("gradients are asked for, and it was optimized in eval mode, without "
                    "backward plans: optimize the module in training mode (module.train()) "
                    "to train it on tuned kernels")
        missing = [n for n, v in zip(self._inputs, values)
                   if v.requires_grad and n not in self.wrt]
        if missing:
            return ("gradients are asked for %s, and its backward plans give those of %s: "
                    "optimize it with example inputs that require them"
                    % (", ".join(missing), ", ".join(self.wrt)))
        if self.backward_trouble:
            return self.backward_trouble
        return "" if self.backward[0] is None else None

    def _given(self, tensors):
        """The nodes given to torch, from the graph's outputs by name."""
        return tuple(tensors[r] if isinstance(r, str) else tuple(tensors[n] for n in r)
                     for r in self._results)

    def _run(self, plan, values):
        """The forward plan run on the graph's inputs: its outputs by name,
        those of the graph and those the plan's graph adds for the
        backward graph to read saved (a forward graph tuned with
        `save`)."""
        tensors = {name: v.contiguous() for name, v in zip(self._inputs, values)}
        device = next(iter(tensors.values())).device if tensors else torch.device("cpu")
        for name, (shape, dtype) in self._outputs.items():
            tensors[name] = torch.empty(shape, dtype=dtype, device=device)
        for t in plan.tensors:
            if t.role == "output" and t.name not in tensors:
                tensors[t.name] = torch.empty(t.shape, dtype=TORCH_DTYPES[t.dtype],
                                              device=device)
        self._execute("forward", plan, tensors, device)
        return tensors

    def run_forward(self, plan, values):
        """_Differentiable's forward: the outputs, in the graph's order, and
        the saved results by name (what the plan outputs beyond them)."""
        tensors = self._run(plan, values)
        saved = {name: tensors[name] for name in tensors
                 if name not in self._outputs and name not in self._inputs}
        return tuple(tensors[name] for name in self._outputs), saved

    def run_backward(self, saved, results, grads, needed, inputs):
        """_Differentiable's backward: the backward plan run on the saved
        inputs, the saved `results` (by name) and the outputs' gradients
        (None: zero); per input, its gradient where `needed`, else None. A
        backward plan that fails warns, and torch computes the gradients
        again from the call's `inputs`."""
        plan, version = self.backward
        tensors = dict(results)
        tensors.update((name, v.contiguous()) for name, v in zip(self._inputs, saved))
        device = saved[0].device if saved else torch.device("cpu")
        for name, grad in zip(self._outputs, grads):
            shape, dtype = self._outputs[name]
            tensors["d_" + name] = grad.contiguous() if grad is not None else \
                torch.zeros(shape, dtype=dtype, device=device)
        for name in self.wrt:
            tensors["d_" + name] = torch.empty_like(tensors[name])
        try:
            self._execute("backward", plan, tensors, device)
        except TunedError as e:
            self._backward_failed(plan, version, e)
            return self._torch_backward(inputs, saved, grads, needed)
        return tuple(tensors["d_" + name] if need and name in self.wrt else None
                     for name, need in zip(self._inputs, needed))

    def _torch_backward(self, inputs, saved, grads, needed):
        """The gradients from torch: the fallback's nodes run again on the
        call's inputs, differentiated by autograd with respect to the
        graph's inputs (`saved`, those very tensors) that need them."""
        incoming = dict(zip(self._outputs, grads))
        with torch.enable_grad():
            given = self.fallback(*inputs)
        pairs = [(value, incoming[name]) for r, node in zip(self._results, given)
                 for name, value in ([(r, node)] if isinstance(r, str) else zip(r, node))
                 if incoming[name] is not None]
        wanted = [v for v, need in zip(saved, needed) if need]
        found = iter(torch.autograd.grad([v for v, _ in pairs], wanted,
                                         [g for _, g in pairs], allow_unused=True))
        return tuple(next(found) if need else None for need in needed)

    def _execute(self, direction, plan, tensors, device):
        """Runs `plan` on `tensors` (by name): its first call checks them
        all, the next ones pass their pointers unchecked."""
        with self._lock:
            if self._checked.get(direction) is plan:
                plan.run_checked(self._pointers(plan, tensors), self._stream(device))
            else:
                plan.run(tensors)
                self._checked[direction] = plan

    @staticmethod
    def _pointers(plan, tensors):
        """The tensors' pointers in the plan's order; an intermediate's
        None (the plan's scratch)."""
        return [tensors[t.name].data_ptr() if t.name in tensors else None
                for t in plan.tensors]

    @staticmethod
    def _stream(device):
        return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None

    def _failed(self, plan, version, error):
        """The plan failed to run: this call and the next ones run in torch
        until the upgrader brings another version."""
        if self.current[0] is plan:
            self.current = (None, version)
        self.trouble = "plan version %d failed to run: %s" % (version, error)

    def _warn(self, why, keeps_plan):
        """Warns once per cause, in the caller's thread, why the partition
        runs in torch (or, `keeps_plan`, why its plan is not upgraded);
        a cause that comes back after a call without one warns again."""
        if why is None:
            if self._warned is not None:  # a module's setattr costs a call's microsecond
                self._warned = None
            return
        if why == self._warned:
            return
        self._warned = why
        what = "runs in torch" if not keeps_plan else "runs plan version %d" % self.version
        warnings.warn("tuned: partition %s (key %s) %s: %s"
                      % (self.name, self.key or "not known yet", what, why),
                      TunedWarning, stacklevel=4)

    def _backward_failed(self, plan, version, error):
        """The backward plan failed to run: gradients come from torch until
        the upgrader brings another version, and a warning says why."""
        if self.backward[0] is plan:
            self.backward = (None, version)
        self.backward_trouble = "backward plan version %d failed to run: %s" % (version, error)
        self._warn(self.backward_trouble, False)

    def use(self, plan, version, direction="forward"):
        """Called by the upgrader: calls from now on run `plan`, as the
        forward plan, or as the `backward` one."""
        if direction == "backward":
            self.backward = (plan, version)
            if self.backward_trouble and self.backward_trouble.startswith("backward plan"):
                self.backward_trouble = None
            return
        self.current = (plan, version)
        if self.trouble and self.trouble.startswith("plan version"):
            self.trouble = None


def _constants(exported):
    """The nodes export folded in (reads of shapes, and what is computed
    of them), by node, with their values on the example inputs: the
    optimized module, made for those shapes, holds them as values."""
    folded = [n for n in exported.graph_module.graph.nodes
              if n.op in ("call_function", "call_method") and n.name in exported.report.other]
    if not folded:
        return {}
    results = capture(exported.graph_module, exported.example_inputs)
    return {n: tuple(results[n]) if isinstance(results[n], torch.Size) else results[n]
            for n in folded}


def _units(graph, partitions, constants):
    """The fx nodes but the constants, in an order where each partition
    is one unit, placed once all it reads is: its nodes may interleave
    with torch's, which come before or after it as their inputs say (a
    partition is convex, so one such order exists)."""
    unit = {}
    for i, p in enumerate(partitions):
        for name in p.nodes:
            unit[name] = i
    order, deps = [], {}
    for node in graph.nodes:
        if node in constants:
            continue
        u = unit.get(node.name, node)
        if u not in deps:
            order.append(u)
            deps[u] = set()
        deps[u] |= {unit.get(a.name, a) for a in node.all_input_nodes
                    if a not in constants} - {u}
    placed, ordered = set(), []
    while order:
        u = next(u for u in order if deps[u] <= placed)
        order.remove(u)
        placed.add(u)
        ordered.append(u)
    return ordered


def _subgraph(gm, members, constants):
    """The partition's nodes as a graph of their own: what they read from
    outside (but parameters, read inside, and constants) as its
    placeholders, and the nodes that torch reads after it as its
    outputs, a tuple."""
    inside = set(members)
    reads, sub, env = [], fx.Graph(), dict(constants)
    for node in members:
        for a in node.all_input_nodes:
            if a not in inside and a not in env and a.op != "get_attr" and a not in reads:
                reads.append(a)
    for a in reads:
        env[a] = sub.placeholder(a.name)
    for node in members:
        for a in node.all_input_nodes:
            if a.op == "get_attr" and a not in env:
                env[a] = sub.node_copy(a)
        env[node] = sub.node_copy(node, lambda x: env[x])
    gives = [n for n in members if any(u not in inside and u not in constants
                                       for u in n.users)]
    sub.output(tuple(env[n] for n in gives))
    return fx.GraphModule(gm, sub), reads, gives


def _attribute(gm, qualified):
    owner, _, name = qualified.rpartition(".")
    return getattr(gm.get_submodule(owner) if owner else gm, name)


def _differentiated(exported, partition):
    """The inputs of `partition` its backward graph differentiates with
    respect to, when the module is in training mode (in eval mode, none):
    its floating inputs that are parameters requiring grad, example
    inputs requiring grad, or computed by torch."""
    gm = exported.graph_module
    if not gm.training:
        return []
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    examples = {name: x for name, x in zip(placeholders, exported.example_inputs)
                if isinstance(x, torch.Tensor)}
    wrt = []
    for name, source in partition.inputs.items():
        if not partition.graph["tensors"][name]["dtype"].startswith(("f", "bf")):
            continue
        if source.kind == "parameter":
            needs = _attribute(gm, source.name).requires_grad
        elif source.kind == "node":
            needs = examples[source.name].requires_grad if source.name in examples else True
        else:
            needs = False
        if needs:
            wrt.append(name)
    return wrt


def _replace(exported):
    """A GraphModule computing what the exported module does, each
    partition's nodes replaced by a call of its TunedPartition; and
    those partitions."""
    gm, partitions = exported.graph_module, exported.partitions
    constants = _constants(exported)
    graph, env, tuned = fx.Graph(), dict(constants), {}
    for unit in _units(gm.graph, partitions, constants):
        if not isinstance(unit, int):
            env[unit] = graph.node_copy(unit, lambda x: env[x])
            continue
        partition = partitions[unit]
        names = set(partition.nodes)
        members = [n for n in gm.graph.nodes if n.name in names]  # in graph order
        fallback, reads, gives = _subgraph(gm, members, constants)
        target = "tuned_%d" % unit
        tuned[target] = TunedPartition(partition, fallback, [n.name for n in reads],
                                       [n.name for n in gives], lambda q: _attribute(gm, q),
                                       _differentiated(exported, partition))
        call = graph.call_module(target, tuple(env[a] for a in reads))
        for i, node in enumerate(gives):
            env[node] = graph.call_function(operator.getitem, (call, i))
    for node in list(graph.nodes):
        if node.op == "get_attr" and not node.users:  # read by partitions alone
            graph.erase_node(node)
    targets = {n.target: tuned[n.target] if n.target in tuned else _attribute(gm, n.target)
               for n in graph.nodes if n.op in ("get_attr", "call_module")}
    return (fx.GraphModule(targets, graph, class_name=type(gm).__name__),
            list(tuned.values()))


def _shape_text(shape):
    return "[%s]" % ", ".join(str(d) for d in shape)


class Optimized(torch.nn.Module):
    """What optimize returns: the module, made for the example inputs'
    dtypes, shapes and devices, its partitions run by tuned.
    `partitions` are its TunedPartitions (each with its `key`,
    `version` and `trouble`); `run` the training run it was optimized
    for, or None."""

    def __init__(self, graph_module, partitions, example_inputs, run=None, follower=None,
                 entries=()):
        super().__init__()
        self.graph_module = graph_module
        self.partitions = partitions
        self.run = run
        self._follower, self._entries = follower, list(entries)
        self._names = [n.target for n in graph_module.graph.nodes if n.op == "placeholder"]
        self._examples = example_inputs
        # what each tensor input must be, compared at once on a call
        self._wanted = [(x.dtype, x.shape, x.device) if isinstance(x, torch.Tensor) else None
                        for x in example_inputs]

    def forward(self, *args, **kwargs):
        values = args
        if kwargs or len(args) != len(self._examples):
            values = self._arguments(args, kwargs)
        for i, value in enumerate(values):
            wanted = self._wanted[i]
            if wanted is not None and not (isinstance(value, torch.Tensor) and
                                           (value.dtype, value.shape, value.device) == wanted):
                self._check(i, value, self._examples[i])
        return self.graph_module(*values)

    def _arguments(self, args, kwargs):
        """The inputs, given by position then by name."""
        values = list(args) + [kwargs.pop(n) for n in self._names[len(args):] if n in kwargs]
        if kwargs or len(values) != len(self._examples):
            raise TypeError("the optimized module takes %d inputs (%s): %d given%s"
                            % (len(self._names), ", ".join(self._names), len(values),
                               ", and %s unknown" % ", ".join(kwargs) if kwargs else ""))
        return values

    def _check(self, i, value, example):
        """An input is what optimize was given as example: its plans are
        made for that dtype, shape and device."""
        if not isinstance(example, torch.Tensor):
            return
        what = "input '%s' (argument %d)" % (self._names[i], i)
        if not isinstance(value, torch.Tensor):
            raise TensorError("%s: a %s given, the module was optimized for a tensor"
                              % (what, type(value).__name__))
        for field, given, wanted in (
                ("dtype", value.dtype, example.dtype),
                ("shape", _shape_text(value.shape), _shape_text(example.shape)),
                ("device", value.device, example.device)):
            if given != wanted:
                raise TensorError("%s: %s %s given, the module was optimized for %s "
                                  "(optimize it again for other inputs)"
                                  % (what, field, str(given).replace("torch.", ""),
                                     str(wanted).replace("torch.", "")))

    def wait(self, timeout=None, min_version=1):
        """Waits until every partition runs a plan of at least
        `min_version`, and a backward plan of at least that version too
        where it has a backward graph (one the daemon refused, with its
        `backward_trouble`, excepted); whether they do, after `timeout`
        seconds (None: no limit)."""
        end = None if timeout is None else time.monotonic() + timeout
        while any(p.version < min_version or
                  (p.wrt and not p.backward_trouble and p.backward_version < min_version)
                  for p in self.partitions):
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(0.05)
        return True


    def advance(self):
        """A module of a training run (optimize's `run`): moves the run to
        the latest version of the module's keys and runs them from the
        next call. Call it in one rank, at a step boundary; the other
        ranks call sync() after it (a barrier between). Returns the pins
        moved, {run, pins: [{key, version, previous}]}."""
        return self._follower.advance(self._run_or_refuse("advance"), self._entries)

    def sync(self):
        """A module of a training run: runs, from the next call, the
        versions the run is pinned to now (another rank's advance() moved
        them)."""
        self._run_or_refuse("sync")
        self._follower.sync(self._entries)

    def _run_or_refuse(self, what):
        if self.run is None:
            raise ValueError("%s() moves a training run's versions: this module was "
                             "optimized without run= (it takes every new version "
                             "between calls)" % what)
        return self.run


def optimize(module, example_inputs, budget=None, socket=None, run=None):
    """`module` (a torch.nn.Module or fx.GraphModule) for calls on inputs
    like `example_inputs` (a tensor or a tuple of them), its partitions
    run by tuned: each is submitted to the daemon at `socket` (None: as
    tuned_gpu.Client finds it) to be tuned for `budget` seconds (None: the
    daemon's default). A partition whose key is cached runs its plan from
    the first call; the others run in torch until their first version.
    A thread of the package then follows the daemon and gives each
    partition every better version, between calls. When the daemon is
    unreachable or a plan fails, the partition runs in torch and a
    TunedWarning says why.

    With `run` (a training run's id, the same in every rank), each
    partition runs the version the run is pinned to instead: the first
    version of its key, the same in every rank, kept while newer ones
    land until the module's advance() (in one rank; sync() in the
    others) moves the run on (docs/client.md, "Training runs")."""
    return optimize_exported(export(module, example_inputs), budget, socket, run)


def optimize_exported(exported, budget=None, socket=None, run=None):
    """optimize() of a module already exported (torch.compile's backend
    keeps the export)."""
    graph_module, partitions = _replace(exported)
    backend = "cuda" if any(isinstance(x, torch.Tensor) and x.is_cuda
                            for x in exported.example_inputs) else "cpu"
    follower = upgrader(socket)
    entries = [Entry(p, budget, backend, run) for p in partitions if p._results is not None]
    follower.start_following(entries)
    return Optimized(graph_module, partitions, exported.example_inputs, run, follower,
                     entries)
