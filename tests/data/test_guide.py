"""docs/guide/datasets.md: its self-contained examples run as written."""

import os
import re
from pathlib import Path

import pytest

GUIDE = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "datasets.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE, re.S)


@pytest.mark.parametrize("marker", ["ManifestDataset(\"train.csv\"", "tiny.parquet",
                                    "tv_tensors.Mask(torch.zeros", "transform_jointly(train"])
def test_guide_example_runs(marker, tmp_path, capsys):
    if marker == "tiny.parquet":
        pytest.importorskip("pyarrow")
    found = [b for b in BLOCKS if marker in b]
    assert len(found) == 1, marker
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(found[0], "<docs/guide/datasets.md>", "exec"), {"__name__": "guide"})
    finally:
        os.chdir(here)
    out = capsys.readouterr().out
    if marker == "tiny.parquet":
        assert "[4, 4, 2]" in out and str(list(range(10))) in out
    if marker.startswith("ManifestDataset"):
        assert "a cat number 0 16" in out
