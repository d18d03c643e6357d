"""structgate-example-choice: a choice-only structured-output engine as a structgate plugin."""
from .backend import ChoiceBackend

__all__ = ["ChoiceBackend"]
__version__ = "0.1.0"
