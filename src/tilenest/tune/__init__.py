"""Measured tuning (DESIGN §3a): structural keys, candidates, the tuning database, and the
cached-winner hook of a plain call. The measuring tuner is `tilenest.tune.tuner` (imported
on use: `Kernel.tune`, `tilenest tune`)."""

from tilenest.tune.candidate import TuneCandidate as TuneCandidate
from tilenest.tune.db import Entry as Entry
from tilenest.tune.db import Sample as Sample
from tilenest.tune.db import TuningDB as TuningDB
from tilenest.tune.key import TuneKey as TuneKey
from tilenest.tune.key import key_for as key_for
