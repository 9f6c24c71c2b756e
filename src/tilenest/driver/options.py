"""`CompileOptions`: every option of one compile, read once.

A compile reads the options the call named (`precision=`, `plan=`, ...) and the environment
knobs that change how it compiles (`TILENEST_CHECKS`, `TILENEST_DUMP`, `TILENEST_DUMP_DIR`,
`TILENEST_TUNE`, `TILENEST_TARGET`). `CompileOptions.from_call` reads them all in one place,
once per compile; the stages read the record, never `os.environ`, so one compile sees one
configuration even if the environment changes while it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tilenest.config import CHECKS, DUMP, DUMP_DIR, TUNE
from tilenest.errors import ArgumentError

# The call's compile options, in the order `compile(...)` documents them. A kernel constant
# may not use these names (runtime.args.RESERVED_NAMES also holds `target`).
OPTION_NAMES = ("precision", "order", "seed", "check_races", "plan", "policy", "constraints",
                "cost_policy", "plan_budget", "strategy", "budget")

# The options each kind of target reads. An option a target would ignore is an error, not a
# silent no-op: `precision=` on cpu would otherwise look like it took effect. (`policy=` is
# read by the reference too: its IEEE evaluation is legal under every numerical policy.)
REFERENCE_OPTIONS = frozenset({"precision", "order", "seed", "check_races", "policy"})
PLANNER_OPTIONS = frozenset({"seed", "plan", "policy", "constraints", "cost_policy",
                             "plan_budget", "strategy", "budget"})

_UNSET: Any = None  # an option the call did not name (every option's own default is None)


def take_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the compile options from a call's keyword arguments (the rest are constants);
    `constraints=` given as a dict becomes sorted pairs so every option stays hashable."""
    options = {k: kwargs.pop(k) for k in OPTION_NAMES if k in kwargs}
    if isinstance(options.get("constraints"), dict):
        options["constraints"] = tuple(sorted(options["constraints"].items()))
    return options


def check_options(target: str, options: dict[str, Any]) -> None:
    """ArgumentError for an option `target` does not read, a bad seed, or an unhashable
    value (options are part of the compiled kernel's cache key)."""
    seed = options.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ArgumentError(f"seed= must be a non-negative int, got {seed!r}")
    accepted = REFERENCE_OPTIONS if target == "reference" else PLANNER_OPTIONS
    ignored = sorted(set(options) - accepted)
    if ignored:
        raise ArgumentError(_ignored_message(target, ignored))
    for name, value in options.items():
        try:
            hash(value)
        except TypeError:
            raise ArgumentError(f"option {name}= must be an immutable value (for plan=, "
                                f"a plan record such as CpuPlan), got {value!r}") from None


def _ignored_message(target: str, ignored: list[str]) -> str:
    given = ", ".join(f"{k}=" for k in ignored)
    one = len(ignored) == 1
    if target == "reference":
        return (f"{given} {'is a planner option' if one else 'are planner options'}; the "
                f"reference target runs the TileIR directly and plans nothing (compile for "
                f"'cpu' or 'cuda' to use {'it' if one else 'them'})")
    return (f"{given} {'is an option' if one else 'are options'} of the reference "
            f"interpreter (tn.interpret, or target='reference'); target {target!r} does not "
            f"read {'it' if one else 'them'} (accepted here: "
            f"{', '.join(f'{k}=' for k in sorted(PLANNER_OPTIONS))})")


@dataclass(frozen=True)
class CompileOptions:
    """One compile's options: those the call named (None: not named, the target's default)
    and the environment knobs compilation reads."""

    precision: str | None = None
    order: str | None = None
    seed: int | None = None
    check_races: bool | None = None
    plan: Any = None
    policy: Any = None
    constraints: Any = None
    cost_policy: Any = None
    plan_budget: Any = None
    strategy: Any = None
    budget: Any = None
    # environment
    checks: bool = False          # TILENEST_CHECKS: verify the IR between stages
    dump: frozenset[str] = frozenset()  # TILENEST_DUMP: stages whose artifacts are written
    dump_dir: str | None = None   # TILENEST_DUMP_DIR (None: stderr)
    tune: str = "cached"          # TILENEST_TUNE
    # The resolved target: the call's, or Kernel.default_target's (the tensors' device, else
    # TILENEST_TARGET); None for a capture alone (ir(), tn.interpret).
    target: str | None = None

    @classmethod
    def from_call(cls, options: dict[str, Any] | None = None,
                  target: str | None = None) -> CompileOptions:
        """The one reader: the call's named options (as `take_options` returns them) plus
        the environment knobs, read now."""
        given = dict(options or {})
        unknown = sorted(set(given) - set(OPTION_NAMES))
        if unknown:
            raise ArgumentError(f"unknown compile option{'s' if len(unknown) > 1 else ''} "
                                f"{', '.join(unknown)}")
        return cls(**given, checks=CHECKS.read(), dump=DUMP.read(), dump_dir=DUMP_DIR.read(),
                   tune=TUNE.read(), target=target)

    def given(self) -> dict[str, Any]:
        """The options the call named, by name: what planners and preparers read."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in OPTION_NAMES and getattr(self, f.name) is not _UNSET}

    def dumps(self, *names: str) -> bool:
        """Whether TILENEST_DUMP asked for any of these stages or artifacts."""
        return any(n in self.dump for n in names)
