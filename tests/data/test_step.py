"""The one sample step (``turboloader.data.step``): every stream's decoder follows the
declared ``SampleDecoder`` protocol and is supplied by its dataset, never built and then
overwritten (video clips plug in their own)."""

import pytest
from helpers.shards import jpeg, write_tar

from turboloader.data import TarDataset, VideoDataset
from turboloader.data import step as step_module
from turboloader.data.step import SampleDecoder
from turboloader.data.video import _ClipDecoder


def test_every_stream_decoder_is_a_sample_decoder_built_once(tmp_path, monkeypatch):
    built = []
    init = step_module.Decoder.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(step_module.Decoder, "__init__", counting)
    video = write_tar(tmp_path / "v.tar", [("a.mp4", b"\x00" * 64), ("a.cls", b"1")])
    st = VideoDataset(video, None)._lease("probe")
    assert isinstance(st.decoder, _ClipDecoder) and isinstance(st.decoder, SampleDecoder)
    assert built == [] and st.plan is None  # no image Decoder made only to be replaced

    images = write_tar(tmp_path / "i.tar", [("a.jpg", jpeg(0)), ("a.cls", b"1")])
    st = TarDataset(images, None)._lease("probe")
    assert built == [st.decoder] and isinstance(st.decoder, SampleDecoder)


def test_the_protocol_declares_all_the_step_asks_of_a_decoder():
    # what the step and the readers call on a stream's decoder is declared, so a decoder
    # built to the protocol (video's) has all of it
    import ast
    import inspect

    from turboloader.data import step, tar_reader

    used = set()
    for mod in (step, tar_reader):
        for n in ast.walk(ast.parse(inspect.getsource(mod))):
            if isinstance(n, ast.Attribute):
                v = n.value
                if (isinstance(v, ast.Name) and v.id in ("dec", "decoder")) or \
                        (isinstance(v, ast.Attribute) and v.attr == "decoder"):
                    used.add(n.attr)
    declared = {n for n in dir(SampleDecoder) if not n.startswith("_")} | \
        set(SampleDecoder.__annotations__)   # methods, and the annotated attributes
    assert {"cached_array", "transform_source", "plan"} <= used
    assert used <= declared, sorted(used - declared)
    for name in declared:
        assert hasattr(_ClipDecoder, name) or name == "transform", name


def test_collate_labels_is_default_collate():
    """A batch's labels as torch's default_collate makes them: int64 tensors for ints (the
    NumPy route, to the int64 limits), bools, floats and strings as it does, and an int
    beyond int64 refused as torch refuses it."""
    import torch
    from torch.utils.data import default_collate

    from turboloader.data.reader import collate_labels

    for labels in ([3, 1, 2], [2**63 - 1, -2**63], [True, False], [1, True], [0.5, 2.0],
                   [1, 2.5], ["a", "b"]):
        got, want = collate_labels(labels), default_collate(labels)
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), labels
        else:
            assert got == want, labels
    with pytest.raises((ValueError, RuntimeError, OverflowError)):
        collate_labels([2**64])
