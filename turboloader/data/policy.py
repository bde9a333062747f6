"""Deprecated: this module was split into :mod:`turboloader.data.failures` (the skip/raise
policy), :mod:`turboloader.data.epochs` (shared epochs) and
:mod:`turboloader.data.telemetry` (per-stream statistics). Its names stay importable from
here for one release, with a DeprecationWarning."""

import warnings

from turboloader.data.epochs import AUTO_EPOCH, EpochMixin, SharedEpoch, mix64 as _mix64, torch_epoch_word
from turboloader.data.failures import FailureLog, FailurePolicy
from turboloader.data.telemetry import COUNTERS, Recorder, Telemetry

__all__ = ["AUTO_EPOCH", "COUNTERS", "EpochMixin", "FailureLog", "FailurePolicy", "Recorder",
           "SharedEpoch", "Telemetry", "torch_epoch_word"]

warnings.warn("turboloader.data.policy was split into turboloader.data.failures, .epochs and "
              ".telemetry; import from there (this module is removed in the next release)",
              DeprecationWarning, stacklevel=2)
