"""The README stays a front page that is true: its commands are the ones CI runs, and the
examples users paste first (the README's migration, the guide's before/after and the native
core's tour) give what they say. tests/test_doc_examples.py runs every block of every page;
the tests here check the results of these few."""

import io
import os
import re
import tarfile
from pathlib import Path

import pytest

from turboloader.tools.synthetic import synthetic_jpegs

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MIGRATE = (ROOT / "docs" / "guide" / "migrate.md").read_text()
NATIVE = (ROOT / "docs" / "guide" / "native.md").read_text()


def _block(containing, text=README):
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if containing in b]
    assert len(blocks) == 1, f"expected one block containing {containing!r}"
    return blocks[0]


def _run(source, replace, cwd, ns=None):
    for old, new in replace:
        assert old in source, old
        source = source.replace(old, new)
    here = os.getcwd()
    os.chdir(cwd)
    try:
        ns = {"__name__": "readme"} if ns is None else ns
        exec(compile(source, "<README>", "exec"), ns)
        return ns
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    samples = synthetic_jpegs(16, seed=2, short_side=(250, 300))
    for shard in range(2):
        with tarfile.open(root / f"train-{shard:05d}.tar", "w") as tar:
            for i in range(shard * 8, shard * 8 + 8):
                for name, blob in ((f"{i:05d}.jpg", samples[i][0]),
                                   (f"{i:05d}.cls", str(samples[i][1]).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(blob)
                    tar.addfile(info, io.BytesIO(blob))
    for i, (blob, label) in enumerate(samples):
        (root / "imagenet" / "train" / f"c{label}").mkdir(parents=True, exist_ok=True)
        (root / "imagenet" / "train" / f"c{label}" / f"{i}.jpg").write_bytes(blob)
    return root


def test_quickstart_commands_are_what_ci_runs():
    quickstart = re.search(r"## Quickstart\n(.*?)\n## ", README, re.S).group(1)
    commands = re.findall(r"^(\./dev\.sh \w+)", quickstart, re.M)
    assert commands == ["./dev.sh demo", "./dev.sh test"]
    # dev.sh knows both jobs, and CI runs the README's test command
    assert re.search(r"case \"\$job\" in demo\|test\|shell\)", (ROOT / "dev.sh").read_text())
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.startswith("./dev.sh")]
    assert ci == ["./dev.sh test"]


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 250
    for section in ("## Quickstart", "## Install", "## Migrating a script", "## Benchmarks",
                    "## Documentation"):
        assert section in README
    # the headline table says when and where it was measured
    bench = README[README.index("## Benchmarks"):README.index("## Documentation")]
    assert re.search(r"20\d\d-\d\d-\d\d", bench)
    # ... on the machine the full run's results name (its CPU's maker and family)
    full = (ROOT / "benchmarks" / "results" / "full.md").read_text()
    cpu = re.search(r"^- machine: (.*)$", full, re.M).group(1)
    maker = next(m for m in ("AMD EPYC", "Intel", "Apple", "Graviton", "ARM") if m in cpu)
    assert maker in bench, (maker, cpu)
    # every link into the repository points at a file that exists
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)", README):
        assert (ROOT / target).exists(), target


def test_every_extra_is_listed_where_users_look():
    # the README's install line, the getting-started table and the install guide name every
    # extra pyproject.toml defines (parquet and video were missing)
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    line = next(l for l in README.splitlines() if "# extras:" in l)
    listed = set(re.findall(r"\b([a-z]+)\b", line.split("# extras:", 1)[1]))
    start = (ROOT / "docs" / "getting-started.md").read_text()
    table = set(re.findall(r"^\| `(\w+)` \|", start, re.M))
    install = (ROOT / "docs" / "guide" / "install.md").read_text()
    guide = install[install.index("# extras:"):]
    guide = set(re.findall(r"\b([a-z]+)\b", guide[:guide.index("```")]))
    for extra in extras:
        assert extra in listed, ("README", extra)
        assert extra in table, ("getting-started", extra)
        assert extra in guide, ("install guide", extra)


def test_native_core_example(data):
    ns = _run(_block("turboloader.TarIndex(", NATIVE), [], data)
    assert ns["img"].shape[2] == 3 and ns["window"].shape == (96, 128, 3)
    assert ns["batch"][0].std() > 0.1


def test_migration_examples(data):
    folder = ("imagenet/train", str(data / "imagenet" / "train"))
    ns = _run(_block("datasets.ImageFolder", MIGRATE), [("range(90)", "range(1)"), folder,
                                                         ("num_workers=8", "num_workers=0")],
              data)
    before = len(ns["dataset"])
    ns = _run(_block("turboloader.ImageFolder(", MIGRATE),
              [("num_workers=8", "num_workers=0"), folder], data)
    assert len(ns["dataset"]) == before == 16
    images, labels = next(iter(ns["loader"]))
    assert images.shape == (16, 3, 224, 224)
    source = _block("turboloader.TarDataset(\"shards/", MIGRATE)
    ns = _run(source, [("shards/train-{00000..00256}.tar",
                        str(data / "train-{00000..00001}.tar")),
                       ("range(90)", "range(2)"), ("num_workers=8", "num_workers=2")], data,
              ns)  # continues the previous block: its train_tf
    assert ns["loader"].epoch == 1
    # the README's five-line version is the guide's "after", the same dataset
    ns = _run(_block("turboloader.ImageFolder(", README),
              [("num_workers=8", "num_workers=0"), folder], data)
    images, labels = next(iter(ns["loader"]))
    assert len(ns["dataset"]) == 16 and images.shape == (16, 3, 224, 224)
