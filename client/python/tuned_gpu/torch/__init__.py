"""tuned_gpu.torch: PyTorch modules as tuned graphs (docs/client.md, "From a
torch model").

    exported = tuned_gpu.torch.export(model, (x,))
    for p in exported.partitions:
        p.graph      # graph.json, as a dict
        p.inputs     # graph tensor name: Source (fx node, parameter, buffer)
        p.outputs    # graph tensor name: Source (the fx node it holds)
    print(exported.report)   # per fx node: partition, or why it stays

    model = tuned_gpu.torch.optimize(model, (x,), budget=120)
    y = model(x)             # its partitions run tuned's plans

Where torch.compile exists, `torch.compile(model, backend="tuned")`
exports each graph dynamo captures (kept in `compiled`) and runs it with
torch, its results unchanged.
"""
import warnings

from .export import Exported, Partition, Report, Source, capture, export, value_of
from .graph import Unsupported
from .optimize import Optimized, TunedPartition, TunedWarning, optimize

__all__ = ["Exported", "Partition", "Report", "Source", "Unsupported", "capture", "export",
           "value_of", "compiled", "optimize", "Optimized", "TunedPartition", "TunedWarning"]

# The exports of the graphs torch.compile gave the "tuned" backend.
compiled = []


def _backend(graph_module, example_inputs):
    """The torch.compile backend: exports the captured graph, then runs it
    as torch would; a graph that cannot be exported warns, and runs."""
    try:
        compiled.append(export(graph_module, tuple(example_inputs), name="compiled"))
    except Exception as e:  # the model must run whatever the export makes of it
        warnings.warn("tuned: the graph torch.compile captured was not exported: %s" % e)
    return graph_module.forward


def _register():
    try:
        from torch._dynamo import register_backend
    except ImportError:  # torch 1.x: no torch.compile
        return
    try:
        register_backend(name="tuned")(_backend)
    except Exception:  # registered already, by an earlier import
        pass


_register()
