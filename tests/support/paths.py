"""Where the tests find the repository's files, independent of the folder a test lives in."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # tests/support/paths.py -> the repository root
EXAMPLES = REPO / "examples"
CSRC = REPO / "csrc"
README = REPO / "README.md"
