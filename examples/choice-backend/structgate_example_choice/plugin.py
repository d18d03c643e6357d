"""The pluggy plugin module named by this package's ``structgate`` entry point.

Keep it cheap: no engine import here, only a ``"module:Class"`` string for the factory.
"""
from structgate.backends.hookspecs import hookimpl
from structgate.backends.registry import BackendSpec


@hookimpl
def structgate_register_backends(register):
    register(BackendSpec(
        name="example-choice",
        factory="structgate_example_choice.backend:ChoiceBackend",
        requires=("structgate_example_choice",),
        distribution="structgate-example-choice",
        install_hint="pip install -e examples/choice-backend",
        description="example plugin: choice lists only (prefix trie x token bytes)",
        kinds=("choice",),
        plugin="structgate-example-choice",
    ))
