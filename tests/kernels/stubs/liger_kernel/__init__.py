"""A stand-in for liger-kernel in CPU tests (see ``transformers/functional.py``)."""

__version__ = "0.0.0+kit.stub"
