"""Mid-epoch checkpoints of an iterable sharded dataset (``TarDataset``): what a state
records, how the main process names where torch's worker streams stand, and how a resumed
pass skips what was delivered.

A state names, per logical worker stream of the rank, how far the stream's item list was
consumed (``pos``), which items it skipped (``failed_pos``) and how many replacements it
yielded; plus the fingerprint it must match (the shard list in order with each shard's
sample count, seed, shuffle, pad, world size, shard mixing, cache). Which samples were *delivered* decides it: the streams this process ran,
torch's round-robin over its workers (``delivered_counts``), or counts a loader tracked. A
stream another process ran is known through what that process reported: the items it
skipped, reported before the batch that skips them was handed out.
"""

from __future__ import annotations

from typing import Any
import os

import torch.utils.data

from turboloader.data.epochs import AUTO_EPOCH, torch_epoch_word
from turboloader.errors import StateMismatchError

__all__ = ["TarCheckpoints", "batches_per_worker", "check_fingerprint", "delivered_counts",
           "shard_fingerprint", "topology"]


def topology(rank, world_size):
    """``(rank, world_size)``: the given ones, else torch.distributed's when initialised,
    else ``(0, 1)``."""
    if rank is not None:
        return rank, world_size
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_fingerprint(names, sizes) -> dict:
    """The part of a state's fingerprint that names the data: ``shards``, the shard names in
    order relative to their common directory (a copy of the data moved elsewhere still
    matches), and ``shard_sizes``, each shard's sample count.

    Example:
        >>> shard_fingerprint(["/d/a-0.tar", "/d/a-1.tar"], [3, 2])
        {'shards': ['a-0.tar', 'a-1.tar'], 'shard_sizes': [3, 2]}
    """
    names = [str(n) for n in names]
    cut = os.path.commonprefix(names).rfind("/") + 1 if names else 0
    return {"shards": [n[cut:] for n in names], "shard_sizes": [int(c) for c in sizes]}


def check_fingerprint(what, state, mine) -> None:
    """Refuse a ``state`` whose fingerprint differs from ``mine`` (a dict of the keys it
    must match), naming what differs; for the shard list, the first shard whose name or
    sample count differs.

    Raises:
        StateMismatchError: a key differs or is missing from ``state``.
    """
    diffs = []
    if "shards" in mine:
        if "shards" not in state or "shard_sizes" not in state:
            diffs.append("the state has no shard list (taken by an older turboloader, "
                         "which could not tell whether the shards are the same)")
        else:
            diffs.extend(_shard_diff(state["shards"], state["shard_sizes"], mine["shards"],
                                     mine["shard_sizes"]))
    for k, v in mine.items():
        if k not in ("shards", "shard_sizes") and state.get(k) != v:
            diffs.append(f"{k}={state.get(k)!r} there, {v!r} here")
    if diffs:
        raise StateMismatchError(
            f"{what}: the state was taken over other data or another topology, so resuming "
            f"would deliver samples twice or never: " + "; ".join(diffs))


def _shard_diff(names, sizes, my_names, my_sizes):
    """What differs between two shard lists (empty: nothing)."""
    names, sizes = list(names), [int(c) for c in sizes]
    out = []
    if len(names) != len(my_names):
        out.append(f"{len(names)} shards there, {len(my_names)} here")
    for i, (a, b) in enumerate(zip(names, my_names)):
        if a != b:
            where = (f" (here at position {my_names.index(a)})" if a in my_names else "")
            out.append(f"shard #{i} is {a!r} there{where}, {b!r} here (the shards are "
                       f"listed in another order, or are other shards)")
            break
    else:
        for i, (a, b) in enumerate(zip(sizes, my_sizes)):
            if a != b:
                out.append(f"shard #{i} ({my_names[i]!r}) holds {a} samples there, {b} here "
                           f"(the shards were re-cut or changed)")
                break
    return out


def delivered_counts(sizes: Any, batches: int, batch_size: int, *,
                     drop_last: bool = False) -> tuple[list[int], int]:
    """Samples each worker stream has delivered after ``batches`` batches of a torch
    DataLoader over an iterable dataset, and the stream the next batch comes from.

    Each worker batches its own stream (``batch_size`` samples, a short last batch unless
    ``drop_last``); the main process takes batches round-robin from worker 0, skipping
    workers that are exhausted (torch's order with ``in_order=True``).

    Example:
        >>> delivered_counts([5, 5, 4], 4, 2)
        ([4, 2, 2], 1)
    """
    if batch_size < 1 or batches < 0:
        raise ValueError(f"need batch_size >= 1 and batches >= 0, got {batch_size}, {batches}")
    nb = [n // batch_size if drop_last else -(-n // batch_size) for n in sizes]
    got, next_worker = batches_per_worker(nb, batches)
    return [min(g * batch_size, n) for g, n in zip(got, sizes)], next_worker


def batches_per_worker(nb, batches):
    """Batches each worker stream has delivered after ``batches`` batches of torch's
    round-robin over streams of ``nb`` batches each (exhausted streams skipped), and the
    stream the next batch comes from.

    Example:
        >>> batches_per_worker([3, 3, 2], 4)
        ([2, 1, 1], 1)
    """
    if batches < 0:
        raise ValueError(f"need batches >= 0, got {batches}")
    if batches > sum(nb):
        raise ValueError(f"{batches} batches is more than the epoch's {sum(nb)}")
    got = [0] * len(nb)
    left, r = batches, 0
    while left:
        active = [w for w in range(len(nb)) if nb[w] > r]
        if left >= len(active):  # a whole round
            for w in active:
                got[w] += 1
            left -= len(active)
            r += 1
            continue
        for w in active[:left]:
            got[w] += 1
        left = 0
    # the next batch: the lowest round still open, lowest worker in it
    waiting = [(got[w], w) for w in range(len(nb)) if nb[w] > got[w]]
    next_worker = min(waiting)[1] if waiting else 0
    return got, next_worker


class TarCheckpoints:
    """``state_dict`` / ``load_state_dict`` for :class:`~turboloader.data.TarDataset` (a
    mixin: it reads the dataset's sizes, epochs, progress and telemetry)."""


    def _fingerprint(self):
        _, world = topology(self.rank, self.world_size)
        return {"num_samples": self.num_samples, **shard_fingerprint(self.urls, self._counts),
                "seed": self.seed, "shuffle": self.shuffle, "pad": self.pad,
                "world_size": world, "mix_shards": self.mix_shards,
                "fixed": bool(self.cache_bytes),
                # the first window's ramp (a ShardCache over remote shards), when on
                **({"mix_ramp": self._mix_ramp} if self._mix_ramp else {})}

    def _take_resume(self, epoch, worker, num_workers, grouping):
        """The resume point of logical worker ``worker`` for this pass of ``grouping``,
        used once.

        Raises:
            ValueError: the loaded state was taken over another grouping, or with another
                number of workers."""
        from turboloader.data.grouping import check_grouping

        resume = self._resume
        if resume is None or resume["epoch"] != epoch:
            return None
        check_grouping(f"{type(self).__name__}: the loaded state is for another pass",
                       resume.get("grouping"), grouping.key)
        if resume["num_workers"] != num_workers:
            raise ValueError(
                f"TarDataset: the loaded state was taken with {resume['num_workers']} "
                f"workers per rank but this pass has {num_workers}; resume with the same "
                f"num_workers (the split of a rank's samples depends on it)")
        entry = resume["workers"].pop(worker, None)
        if not resume["workers"]:
            self._resume = None
        return entry

    def state_dict(self, *, batches=None, batch_size=None, num_workers=None, drop_last=False,
                   delivered=None, grouping=None) -> dict:
        """The position in the current epoch, to continue from with :meth:`load_state_dict`.

        Which samples were *delivered* decides the state; three ways to say it:

        * no arguments: the streams this process ran. Right in a DataLoader worker (what
          ``torchdata.stateful_dataloader.StatefulDataLoader`` calls; it saves one such
          state per worker) and for ``num_workers=0``.
        * ``batches=k, batch_size=B, num_workers=W`` (and ``drop_last``): the main process
          of a plain ``torch.utils.data.DataLoader`` (``in_order=True``, the default) that
          has handed out ``k`` batches of this epoch. Its workers' streams and torch's
          round-robin over them are deterministic, so each worker's count follows. The
          result is the same on every rank (ranks get equal shares), so rank 0's copy in a
          checkpoint serves all ranks.
        * ``delivered=[n_0, ..., n_{W-1}]``: samples delivered from each logical worker
          stream (a loader that tracks them, e.g. the thread backend).

        The rule is one for every grouping (``grouping``: what the pass yields, default the
        dataset's samples; ``batched()`` / ``bucketed()`` pass theirs): positions come from
        the streams this process ran, or from each stream's batches counted by the grouping
        (:meth:`~turboloader.data.grouping.Grouping.marks`; samples are counted in batches of
        ``batch_size``). A grouping that orders the items itself (buckets) is counted in
        batches only, and its state records it (``grouping``).

        Returns:
            a JSON-able dict: ``format`` (``"turboloader.TarDataset/1"``), ``scope``
            (``"rank"``, or ``"worker"`` from inside a DataLoader worker), ``epoch``,
            ``num_workers``, ``next_worker`` (the stream the next batch comes from),
            ``workers`` (``{"<logical worker>": {"pos": items of its list consumed,
            "failed_pos": positions skipped, "replaced": replacements yielded,
            "failures": failures counted}}``), ``delivered`` (samples this rank delivered in the epoch) and the
            fingerprint it must match: ``num_samples``, ``shards`` (the shard names in
            order, relative to their common directory), ``shard_sizes`` (samples per
            shard), ``seed``, ``shuffle``, ``pad``, ``world_size``, ``mix_shards``,
            ``fixed``, ``mix_ramp`` where the first window ramps (a
            :class:`~turboloader.io.shard_cache.ShardCache` over remote shards); and
            ``grouping``, the grouping's ``key``, when it orders the items itself.

        Raises:
            ValueError: inconsistent arguments, or this epoch was read in this process
                under another grouping.

        Example:
            >>> state = ds.state_dict(batches=step, batch_size=256, num_workers=8)  # doctest: +SKIP
            >>> ds2 = TarDataset(urls, tf); ds2.load_state_dict(state)
            >>> for images, labels in DataLoader(ds2, batch_size=256, num_workers=8): ...
        """
        from turboloader.data.grouping import Samples, check_grouping, position_after

        grouping = Samples() if grouping is None else grouping
        key = grouping.key
        what = f"{type(self).__name__}.state_dict"
        if delivered is not None and (key is not None or batches is not None):
            raise ValueError(f"{what}: delivered= counts the samples of streams in the "
                             f"dataset's order, without batches=; a bucketed stream's "
                             f"position is counted in batches (batches=, num_workers=)")
        # the grouping whose batches were handed out (samples: in batches of batch_size)
        counted = grouping.counted(batch_size, drop_last) if batches is not None else grouping
        epoch = self._automatic_state_epoch(batches, num_workers, delivered)
        rank, _ = topology(self.rank, self.world_size)
        base = {"format": "turboloader.TarDataset/1", "epoch": epoch, "rank": rank,
                **self._fingerprint()}
        if key is not None:
            base["grouping"] = key
        progress = {w: p for w, p in self._progress.items() if p["epoch"] == epoch}
        for p in progress.values():
            check_grouping(f"{what}: this epoch was read here as another grouping",
                           p.get("grouping"), key)
        info = torch.utils.data.get_worker_info()
        if info is not None and batches is None and delivered is None:
            # inside a DataLoader worker: this worker's own stream
            entries = {w: _own(p) for w, p in progress.items()
                       if p["num_workers"] == info.num_workers}
            if not entries:  # not started in this epoch yet
                resume = self._resume
                if resume is not None and resume["epoch"] == epoch:
                    entries = {w: dict(e) for w, e in resume["workers"].items()}
            return {**base, "scope": "worker", "num_workers": info.num_workers,
                    "next_worker": 0, "workers": {str(w): e for w, e in entries.items()},
                    "delivered": _delivered(entries.values())}
        if batches is None and delivered is None:  # the streams run in this process
            W = max((p["num_workers"] for p in progress.values()), default=1)
            entries = {w: (_own(progress[w]) if w in progress
                           and progress[w]["num_workers"] == W else position_after(0, 0))
                       for w in range(W)}
            return {**base, "scope": "rank", "num_workers": W, "next_worker": 0,
                    "workers": {str(w): e for w, e in entries.items()},
                    "delivered": _delivered(entries.values())}
        W = max(1, int(num_workers or 0)) if delivered is None else len(delivered)
        sizes = self.worker_sizes(W)
        reported = None
        known = []  # per stream: what is known of its skips
        for w in range(W):
            p = progress.get(w)
            if p is None or p["num_workers"] != W:
                # a stream another process ran (torch's workers): the items it skipped, as
                # it reported them before handing out the batches that skip them
                if reported is None:
                    reported = self._telemetry.stream_failures(epoch, W)
                fails = reported.get(w)
                p = ({"failed_pos": list(fails), "pos": sizes[w], "failures": len(fails)}
                     if fails else None)
            known.append(p)
        if delivered is not None:
            delivered = [int(d) for d in delivered]
            if any(d < 0 or d > n for d, n in zip(delivered, sizes)):
                raise ValueError(f"delivered counts {delivered} do not fit the worker shares "
                                 f"{sizes}")
            entries = {w: position_after(delivered[w], sizes[w], known[w]) for w in range(W)}
            next_worker = 0
        else:
            marks = [counted.marks(self, epoch, w, W, sizes[w], known[w]) for w in range(W)]
            got, next_worker = batches_per_worker([n for n, _ in marks], int(batches))
            entries = {w: after(g) for w, ((_, after), g) in enumerate(zip(marks, got))}
        return {**base, "scope": "rank", "num_workers": W, "next_worker": next_worker,
                "workers": {str(w): e for w, e in entries.items()},
                "delivered": _delivered(entries.values())}

    def _automatic_state_epoch(self, batches, num_workers, delivered):
        """The epoch word a state of the current pass names (see ``_pass_epoch``)."""
        e = self._epoch
        value = e.value
        if 0 <= value < AUTO_EPOCH:
            return value  # explicit
        if value >= AUTO_EPOCH and e.claim == 0:
            return value  # pinned by load_state_dict (or below) and not started yet
        in_worker = torch.utils.data.get_worker_info() is not None
        ran_here = self._last_pass is not None and (in_worker or not num_workers)
        if ran_here:
            return self._last_pass
        nothing_delivered = not batches and not any(delivered or [])
        if self._last_pass is None and nothing_delivered:
            if in_worker:
                return -1  # this worker has not started: its state names no pass
            # no pass yet: pin the word the next pass will use, so the state can name it
            e.value = torch_epoch_word()
            return e.value
        raise ValueError(
            "TarDataset.state_dict: this pass used an automatic epoch (no set_epoch call) "
            "drawn inside the DataLoader's workers, so the main process cannot name its "
            "order. For mid-epoch checkpoints call dataset.set_epoch(epoch) before each "
            "epoch (turboloader.DataLoader and TurboDataModule do), or use "
            "StatefulDataLoader, whose workers save their own states")

    def _check_state_positions(self, state):
        """Positions that cannot come from state_dict would deliver duplicates or skip
        samples: refuse them (ValueError naming the field)."""
        def bad(what):
            raise ValueError(f"TarDataset.load_state_dict: {what}")

        try:
            W, epoch = int(state["num_workers"]), int(state["epoch"])
            nxt = int(state.get("next_worker", 0))
            workers = state["workers"]
        except (KeyError, TypeError, ValueError) as exc:
            bad(f"malformed state ({type(exc).__name__}: {exc})")
        if W < 0 or epoch < -1:
            bad(f"negative num_workers {W} or epoch {epoch}")
        sizes = self.worker_sizes(max(W, 1))
        if not 0 <= nxt < max(W, 1):
            bad(f"next_worker {nxt} is not one of the {max(W, 1)} streams")
        if not isinstance(workers, dict):
            bad("workers must be a dict")
        for w, e in workers.items():
            try:
                w = int(w)
                pos, replaced = int(e["pos"]), int(e["replaced"])
                failures = int(e["failures"])
                failed = [int(f) for f in e["failed_pos"]]
            except (KeyError, TypeError, ValueError) as exc:
                bad(f"malformed entry for worker {w!r} ({type(exc).__name__}: {exc})")
            if not 0 <= w < len(sizes):
                bad(f"worker {w} is not one of the {len(sizes)} streams")
            if not 0 <= pos <= sizes[w]:
                bad(f"worker {w}: position {pos} is outside its share of {sizes[w]} samples")
            if len(set(failed)) != len(failed) or any(not 0 <= f < pos for f in failed):
                bad(f"worker {w}: skipped positions {failed[:8]} are not distinct positions "
                    f"before {pos}")
            if not 0 <= replaced <= len(failed) or failures < 0:
                bad(f"worker {w}: {replaced} replacements / {failures} failures do not fit "
                    f"{len(failed)} skips")

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (from :meth:`state_dict`): the next pass over its epoch
        skips what was delivered, by offset into each worker's item list (nothing is read or
        decoded again), and yields the rest in the same order with the same transform
        parameters. Sets the epoch to the state's (call ``set_epoch`` with that epoch, or
        not at all, before the pass; another epoch discards the resume point).

        Call it in the main process before the DataLoader starts its workers (with
        ``persistent_workers=True``, before the first ``iter(loader)``), with the same
        ``num_workers`` as when the state was taken. ``StatefulDataLoader`` calls it inside
        each worker with that worker's state, which is also supported.

        Raises:
            StateMismatchError: the state was taken over other data or another topology:
                other shards, the same shards in another order or cut into other sizes,
                another seed, shuffle, pad, world size, shard mixing or cache (a
                ``ValueError``; the message names what differs).
            ValueError: the state is not a TarDataset state, or names impossible positions.
        """
        if not isinstance(state, dict) or state.get("format") != "turboloader.TarDataset/1":
            raise ValueError("not a TarDataset state (expected format 'turboloader.TarDataset/1')")
        mine = self._fingerprint()
        if state.get("mix_ramp"):  # a ramped order resumed without one would differ
            mine.setdefault("mix_ramp", 0.0)
        check_fingerprint(f"{type(self).__name__}.load_state_dict", state, mine)
        rank, _ = topology(self.rank, self.world_size)
        self._check_state_positions(state)
        workers = {}
        for w, e in state["workers"].items():
            e = {k: (list(v) if isinstance(v, list) else int(v)) for k, v in e.items()}
            if state.get("rank") != rank:
                # positions are rank-independent (equal shares); the skip lists are not
                e.update(failed_pos=[], replaced=0, failures=0)
            workers[int(w)] = e
        self._resume = {"epoch": int(state["epoch"]), "num_workers": int(state["num_workers"]),
                        "next_worker": int(state.get("next_worker", 0)), "workers": workers,
                        "grouping": state.get("grouping")}
        if torch.utils.data.get_worker_info() is None and int(state["epoch"]) >= 0:
            # an automatic pass is pinned for the next pass only (see _pass_epoch)
            self._epoch.value = int(state["epoch"])


def _own(p):
    """The resume entry of a stream this process ran, from its progress."""
    return {"pos": p["pos"], "failed_pos": list(p["failed_pos"]), "replaced": p["replaced"],
            "failures": p["failures"]}


def _delivered(entries):
    """Samples delivered by streams at these entries: items consumed less those skipped,
    plus the replacements."""
    return int(sum(e["pos"] - len(e["failed_pos"]) + e["replaced"] for e in entries))
