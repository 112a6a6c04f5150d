"""The models of examples/torch, for the tests of tuned_gpu.torch."""
import importlib.util
import os

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                        "torch")


def load_example(name):
    """examples/torch/<name>.py's example(): its module and inputs."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.example()
