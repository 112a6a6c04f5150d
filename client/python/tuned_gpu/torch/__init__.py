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
optimizes each graph dynamo captures (its export kept in `compiled`): its
partitions run tuned's plans, as optimize() gives them.
"""
import warnings

from .export import Exported, Partition, Report, Source, capture, export, value_of
from .graph import Unsupported
from .optimize import Optimized, TunedPartition, TunedWarning, optimize, optimize_exported

__all__ = ["Exported", "Partition", "Report", "Source", "Unsupported", "capture", "export",
           "value_of", "compiled", "optimize", "Optimized", "TunedPartition", "TunedWarning"]

# The exports of the graphs torch.compile gave the "tuned" backend.
compiled = []


def _backend(graph_module, example_inputs):
    """The torch.compile backend: the captured graph optimized (its
    partitions tuned by the daemon, in torch until their first version);
    a graph that cannot be exported warns, and runs as torch would."""
    try:
        exported = export(graph_module, tuple(example_inputs), name="compiled")
    except Exception as e:  # the model must run whatever the export makes of it
        warnings.warn("tuned: the graph torch.compile captured was not exported: %s" % e)
        return graph_module.forward
    compiled.append(exported)
    return optimize_exported(exported).forward


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
