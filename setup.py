"""Build shim for tools that still call ``setup.py``; everything is declared in ``pyproject.toml``.

``pip install .`` and ``pip wheel --no-deps .`` read ``pyproject.toml`` directly; this file only lets
older workflows (``python setup.py bdist_wheel``, ``pip install -e .`` with an old pip) find it.
"""
from setuptools import setup

setup()
